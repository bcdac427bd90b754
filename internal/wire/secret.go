package wire

// Operations of the secret service, served only to callers that sign.
const (
	SecretGet  = "get"
	SecretList = "list"
)

// SecretName names a secret: get.
type SecretName struct {
	Name string `json:"name"`
}

// SecretValue answers get. A secret is UTF-8 text.
type SecretValue struct {
	Value string `json:"value"`
}

// SecretNames answers list, sorted.
type SecretNames struct {
	Names []string `json:"names"`
}
