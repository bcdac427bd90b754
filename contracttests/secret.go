package contracttests

import (
	"errors"
	"maps"
	"slices"
	"testing"

	"github.com/abi-engine/engine/ports"
)

// SecretHarness opens secret stores for RunSecret.
type SecretHarness interface {
	// NewStore makes a store for one subtest that holds exactly the given
	// secrets (names are letters, digits and underscores, not starting with
	// a digit) and returns a function that opens a handle on it.
	NewStore(t *testing.T, secrets map[string]string) (open func(t *testing.T) ports.Secrets)
}

// SecretHarnessFunc adapts a function to SecretHarness.
type SecretHarnessFunc func(t *testing.T, secrets map[string]string) func(t *testing.T) ports.Secrets

// NewStore calls f.
func (f SecretHarnessFunc) NewStore(t *testing.T, secrets map[string]string) func(t *testing.T) ports.Secrets {
	return f(t, secrets)
}

// secretSample holds values that tempt a parser: separators, quotes,
// comment marks, escapes, newlines, unicode, leading and trailing spaces,
// and nothing at all.
var secretSample = map[string]string{
	"DB_PASSWORD":  "s3cr3t",
	"API_KEY":      "with spaces and = signs",
	"lower_case_1": "unicode ключ 値 ✓",
	"QUOTES":       `"double" and 'single' quotes`,
	"HASH":         "#not a comment",
	"BACKSLASH":    `C:\path\n not a newline`,
	"MULTI_LINE":   "line one\nline two",
	"PADDED":       "  padded  ",
	"EMPTY":        "",
	"_UNDERSCORE":  "u",
}

// RunSecret holds a secret adapter to the ports.Secrets contract.
func RunSecret(t *testing.T, h SecretHarness) {
	cases := []struct {
		name    string
		secrets map[string]string
		run     func(t *testing.T, open func(t *testing.T) ports.Secrets, secrets map[string]string)
	}{
		{"EmptyStore", map[string]string{}, secretEmptyStore},
		{"GetReturnsEachValue", secretSample, secretGetReturnsEachValue},
		{"MissingIsNotFound", secretSample, secretMissingIsNotFound},
		{"EmptyNameIsInvalid", secretSample, secretEmptyNameIsInvalid},
		{"ListIsSorted", secretSample, secretListIsSorted},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.run(t, newStore(t, HarnessFunc[ports.Secrets](func(t *testing.T) func(*testing.T) ports.Secrets {
				return h.NewStore(t, c.secrets)
			})), c.secrets)
		})
	}
}

func secretEmptyStore(t *testing.T, open func(t *testing.T) ports.Secrets, _ map[string]string) {
	s := open(t)
	names, err := s.List(ctx(t))
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	if len(names) != 0 {
		t.Fatalf("an empty store lists %q", names)
	}
	if v, err := s.Get(ctx(t), "DB_PASSWORD"); !errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("Get in an empty store = %q, %v; want ErrNotFound", v, err)
	}
}

func secretGetReturnsEachValue(t *testing.T, open func(t *testing.T) ports.Secrets, secrets map[string]string) {
	s := open(t)
	for name, want := range secrets {
		got, err := s.Get(ctx(t), name)
		if err != nil {
			t.Fatalf("Get %q: %v", name, err)
		}
		if got != want {
			t.Fatalf("Get %q = %q, want %q", name, got, want)
		}
	}
}

func secretMissingIsNotFound(t *testing.T, open func(t *testing.T) ports.Secrets, _ map[string]string) {
	s := open(t)
	for _, name := range []string{"NOT_THERE", "db_password", "DB_PASSWORD_", "DB"} {
		if v, err := s.Get(ctx(t), name); !errors.Is(err, ports.ErrNotFound) {
			t.Fatalf("Get %q = %q, %v; want ErrNotFound", name, v, err)
		}
	}
}

// An empty name is a malformed call, as an empty key is, not a secret
// missing from the deployment.
func secretEmptyNameIsInvalid(t *testing.T, open func(t *testing.T) ports.Secrets, _ map[string]string) {
	s := open(t)
	if v, err := s.Get(ctx(t), ""); !errors.Is(err, ports.ErrInvalidArgument) || v != "" {
		t.Fatalf("Get of no name = %q, %v; want ErrInvalidArgument", v, err)
	}
}

func secretListIsSorted(t *testing.T, open func(t *testing.T) ports.Secrets, secrets map[string]string) {
	s := open(t)
	got, err := s.List(ctx(t))
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	if want := slices.Sorted(maps.Keys(secrets)); !slices.Equal(got, want) {
		t.Fatalf("List = %q, want %q", got, want)
	}
}
