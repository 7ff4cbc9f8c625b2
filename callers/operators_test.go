package callers_test

import (
	"os"
	"strings"
	"testing"

	"golang.org/x/crypto/bcrypt"

	"github.com/leadintake/leadintake/callers"
)

// Hashes of the tests: cost 10, and one too cheap to accept.
const (
	aliceHash = "$2a$10$oKi1W33EYrxV778bqMk6AuQbmbxGih35WEVkTQbzGdffG./7xtyFK" // correct horse battery staple
	cheapHash = "$2a$04$7o9kiSUJ8p9gEyte7Wfy6uIjmrRFfoVoJR5HFKVGfiG6jSRex.OSC"
)

// The example of docs/console.md is a clients file that ParseFile takes:
// its operators, their roles, and the hash of the password it names.
func TestOperatorsOfTheDocs(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../docs/console.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "```yaml\n")
	example, _, ok2 := strings.Cut(rest, "```")
	if !ok || !ok2 || !strings.Contains(example, "operators:") {
		t.Fatal("docs/console.md has no yaml example of operators")
	}
	set, err := callers.ParseFile([]byte(example))
	if err != nil {
		t.Fatalf("the docs' example: %v", err)
	}
	ops := set.Operators()
	if len(ops) != 2 || ops[0].Name != "alice" || ops[0].Role != callers.RoleOperator || ops[1].Name != "bob" || ops[1].Role != callers.RoleViewer {
		t.Fatalf("operators %+v", ops)
	}
	alice, ok := set.Operator("alice")
	if !ok || bcrypt.CompareHashAndPassword(alice.PasswordHash, []byte("correct horse battery staple")) != nil {
		t.Error("alice's hash is not of the password the docs name")
	}
	if _, ok := set.Operator("carol"); ok {
		t.Error("carol found")
	}
	// The file's operators survive the merge with API_CLIENTS.
	env, err := callers.ParseAPIClients("other=" + strings.Repeat("ab", 32))
	if err != nil {
		t.Fatal(err)
	}
	merged, err := callers.Merge(env, set)
	if err != nil || len(merged.Operators()) != 2 {
		t.Fatalf("merged: %v %v", merged, err)
	}
}

// A bad operator is one line naming it (by name, or position) and what is
// wrong, never the hash.
func TestOperatorRefusals(t *testing.T) {
	t.Parallel()
	file := func(operators string) string { return "clients: []\noperators:\n" + operators }
	for _, c := range []struct{ name, file, want string }{
		{"NotAList", "clients: []\noperators: {name: alice}\n", "want a list of operators"},
		{"NotAMapping", file("  - alice\n"), "operator 1 (line 3): want a mapping"},
		{"BadName", file("  - {name: Alice!, password_bcrypt: '" + aliceHash + "', role: operator}\n"), "operator 1 (line 3): name must be"},
		{"Reserved", file("  - {name: cli, password_bcrypt: '" + aliceHash + "', role: operator}\n"), `operator "cli": the name is the audit's`},
		{"Twice", file("  - {name: alice, password_bcrypt: '" + aliceHash + "', role: operator}\n  - {name: alice, password_bcrypt: '" + aliceHash + "', role: viewer}\n"), `operator "alice" is listed twice`},
		{"NoHash", file("  - {name: alice, role: operator}\n"), `operator "alice": password_bcrypt is required`},
		{"PlainPassword", file("  - {name: alice, password_bcrypt: correct-horse-battery-staple, role: operator}\n"), `operator "alice": password_bcrypt is not a bcrypt hash`},
		{"CutHash", file("  - {name: alice, password_bcrypt: '" + aliceHash[:50] + "', role: operator}\n"), `operator "alice": password_bcrypt is not a bcrypt hash`},
		{"Cheap", file("  - {name: alice, password_bcrypt: '" + cheapHash + "', role: operator}\n"), `operator "alice": password_bcrypt has cost 4; at least 10`},
		{"NoRole", file("  - {name: alice, password_bcrypt: '" + aliceHash + "'}\n"), `operator "alice": role must be viewer or operator`},
		{"BadRole", file("  - {name: alice, password_bcrypt: '" + aliceHash + "', role: admin}\n"), `operator "alice": role must be viewer or operator`},
		{"UnknownMember", file("  - {name: alice, password: correct-horse, password_bcrypt: '" + aliceHash + "', role: viewer}\n"), "operator 1 (line 3): unknown member at line 3"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			_, err := callers.ParseFile([]byte(c.file))
			if err == nil {
				t.Fatal("accepted")
			}
			msg := err.Error()
			if !strings.Contains(msg, c.want) || strings.Contains(msg, "\n") {
				t.Errorf("error %q, want one line with %q", msg, c.want)
			}
			for _, secret := range []string{aliceHash[7:], cheapHash[7:], aliceHash[:50], "correct-horse"} {
				if strings.Contains(msg, secret) {
					t.Errorf("error %q shows a hash or a password", msg)
				}
			}
		})
	}
}
