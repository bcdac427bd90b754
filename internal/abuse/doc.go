// Package abuse holds the suite of hostile and careless callers: each
// input of its table is sent to a real engine over a real broker, its
// answer checked, while a bystander caller's calls must all succeed.
package abuse
