package domain

import "fmt"

// Role is how an engine takes part on its NATS account.
type Role int

const (
	// RoleServe takes the lease, serves the kernel services and hosts jobs.
	RoleServe Role = iota
	// RoleClient never touches the lease and opens no backend: every service
	// is a client of the serving engine.
	RoleClient
	// RoleAuto serves when no engine does and is a client otherwise. It never
	// stands by.
	RoleAuto
)

func (r Role) String() string {
	switch r {
	case RoleServe:
		return "serve"
	case RoleClient:
		return "client"
	case RoleAuto:
		return "auto"
	}
	return fmt.Sprintf("Role(%d)", int(r))
}

// ParseRole reads a role name; the empty name is RoleServe, the default.
func ParseRole(s string) (Role, error) {
	switch s {
	case "", "serve":
		return RoleServe, nil
	case "client":
		return RoleClient, nil
	case "auto":
		return RoleAuto, nil
	}
	return 0, fmt.Errorf("%w: role %q: want serve, client or auto", ErrInvalidConfig, s)
}
