package operator

import (
	"context"
	"errors"

	"github.com/leadintake/leadintake/store"
)

// Role is what an actor may do: a viewer reads everything but the
// enquiries; an operator also sees the enquiries and acts.
type Role string

// The roles.
const (
	RoleViewer   Role = "viewer"
	RoleOperator Role = "operator"
)

// Actor is who acts: every method of Operator that acts or shows personal
// data takes one, and the audit names it.
type Actor struct {
	// Name is "cli", "admin" (the admin API, with ADMIN_USER), or a
	// console login.
	Name string
	// Via is how they reached the service: store.ViaCLI,
	// store.ViaAdminAPI or store.ViaConsole.
	Via  string
	Role Role
}

// The actors of the command line and of the admin API's JSON endpoints.
var (
	CLI      = Actor{Name: "cli", Via: store.ViaCLI, Role: RoleOperator}
	AdminAPI = Actor{Name: "admin", Via: store.ViaAdminAPI, Role: RoleOperator}
)

// ConsoleLogin is the actor of a console login: its name and role.
func ConsoleLogin(name string, role Role) Actor {
	return Actor{Name: name, Via: store.ViaConsole, Role: role}
}

// ErrForbidden is returned for an action the actor's role does not allow
// (a viewer's write, or a viewer's look at an enquiry): nothing is done or
// shown.
var ErrForbidden = errors.New("this login may not do that (role viewer)")

// CanAct reports whether the actor may act and see enquiries.
func (a Actor) CanAct() bool { return a.Name != "" && a.Role == RoleOperator }

// may returns ErrForbidden unless the actor may act, and the store's Who
// for the audit.
func (a Actor) may() (*store.Who, error) {
	if !a.CanAct() {
		return nil, ErrForbidden
	}
	return &store.Who{Name: a.Name, Via: a.Via}, nil
}

type actorKey struct{}

// WithActor returns ctx carrying the actor a request authenticated as (the
// admin listener's login, for the console).
func WithActor(ctx context.Context, a Actor) context.Context {
	return context.WithValue(ctx, actorKey{}, a)
}

// ActorFrom returns the actor ctx carries, if any.
func ActorFrom(ctx context.Context) (Actor, bool) {
	a, ok := ctx.Value(actorKey{}).(Actor)
	return a, ok
}
