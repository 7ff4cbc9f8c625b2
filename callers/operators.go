package callers

import (
	"fmt"
	"slices"

	"go.yaml.in/yaml/v3"
	"golang.org/x/crypto/bcrypt"
)

// Operator is a person's login to the operator console: a name, a bcrypt
// hash of the password (never the password), and a role.
type Operator struct {
	// Name is 1 to 64 characters of a-z 0-9 _ . -; the audit names it.
	Name string
	// PasswordHash is the bcrypt hash of the password.
	PasswordHash []byte
	// Role is RoleViewer or RoleOperator.
	Role string
}

// The roles of a console login: a viewer sees everything but the
// enquiries and writes nothing; an operator also sees the enquiries and
// acts.
const (
	RoleViewer   = "viewer"
	RoleOperator = "operator"
)

// MinBcryptCost is the lowest cost a password hash may have: a cheaper
// hash is quick to guess from, should the file leak.
const MinBcryptCost = bcrypt.DefaultCost

var operatorMembers = map[string]bool{"name": true, "password_bcrypt": true, "role": true}

// reservedOperators are the actors of the command line and of the admin
// API in the audit: no login may pass for them.
var reservedOperators = []string{"cli", "admin"}

// Operators returns the console logins of the clients file, in its order.
func (s *Set) Operators() []Operator { return s.operators }

// Operator returns the console login of name.
func (s *Set) Operator(name string) (Operator, bool) {
	i := slices.IndexFunc(s.operators, func(o Operator) bool { return o.Name == name })
	if i < 0 {
		return Operator{}, false
	}
	return s.operators[i], true
}

// parseOperators reads the clients file's operators:
//
//	operators:
//	  - name: alice                  # 1..64 of a-z 0-9 _ . -
//	    password_bcrypt: $2a$12$...  # htpasswd -nBC 12 alice, the part after the colon
//	    role: operator               # or viewer
//
// Its errors name the operator (by name, or position) and the member at
// fault, and never quote a hash.
func parseOperators(list *yaml.Node) ([]Operator, error) {
	if list.Kind != yaml.SequenceNode {
		return nil, fmt.Errorf(`want a list of operators under "operators"`)
	}
	out := make([]Operator, 0, len(list.Content))
	for i, n := range list.Content {
		at := fmt.Sprintf("operator %d (line %d)", i+1, n.Line)
		if n.Kind != yaml.MappingNode {
			return nil, fmt.Errorf("%s: want a mapping with name, password_bcrypt and role", at)
		}
		if err := checkMembers(n, operatorMembers, at); err != nil {
			return nil, err
		}
		name, _ := scalar(member(n, "name"))
		if !ownerNameRE.MatchString(name) {
			return nil, fmt.Errorf("%s: name must be 1 to 64 characters of a-z 0-9 _ . -", at)
		}
		at = fmt.Sprintf("operator %q", name)
		if slices.Contains(reservedOperators, name) {
			return nil, fmt.Errorf("%s: the name is the audit's for the command line or the admin API; choose another", at)
		}
		if slices.ContainsFunc(out, func(o Operator) bool { return o.Name == name }) {
			return nil, fmt.Errorf("%s is listed twice", at)
		}
		hash, ok := scalar(member(n, "password_bcrypt"))
		if !ok || hash == "" {
			return nil, fmt.Errorf("%s: password_bcrypt is required (a bcrypt hash of the password)", at)
		}
		cost, err := bcrypt.Cost([]byte(hash))
		if err != nil || len(hash) != 60 {
			// bcrypt's errors may quote the hash: not repeated.
			return nil, fmt.Errorf("%s: password_bcrypt is not a bcrypt hash ($2a$, $2b$ or $2y$, a cost, then 53 characters)", at)
		}
		if cost < MinBcryptCost {
			return nil, fmt.Errorf("%s: password_bcrypt has cost %d; at least %d", at, cost, MinBcryptCost)
		}
		role, _ := scalar(member(n, "role"))
		if role != RoleViewer && role != RoleOperator {
			return nil, fmt.Errorf("%s: role must be viewer or operator", at)
		}
		out = append(out, Operator{Name: name, PasswordHash: []byte(hash), Role: role})
	}
	return out, nil
}
