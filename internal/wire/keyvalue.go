package wire

// Operations of the keyvalue service. Values are bytes, base64 in JSON.
const (
	KVSet           = "set"
	KVGet           = "get"
	KVSetIfAbsent   = "set_if_absent"
	KVDelete        = "delete"
	KVDeleteIfValue = "delete_if_value"
	KVExists        = "exists"
	KVListKeys      = "list_keys"
)

// KVKey names a key: get, delete, exists.
type KVKey struct {
	Key string `json:"key"`
}

// KVWrite writes a value: set, set_if_absent. Value must be given: left
// out, it is refused rather than read as the empty value; null is the
// empty value, as every Go facade sends a nil one. TTLSeconds 0 or left
// out keeps it; null is refused, as protocol.md gives it no meaning and no
// Go facade sends it (a TTL of 0 is left out).
type KVWrite struct {
	Key        string  `json:"key"`
	Value      Bytes   `json:"value"`
	TTLSeconds Seconds `json:"ttl_seconds,omitempty" strictjson:"notnull"`
}

// KVKeyValue is a key and the value it must hold: delete_if_value.
type KVKeyValue struct {
	Key   string `json:"key"`
	Value Bytes  `json:"value"`
}

// KVValue answers get.
type KVValue struct {
	Value Bytes `json:"value"`
}

// KVList asks for a page of keys.
type KVList struct {
	Prefix string `json:"prefix,omitempty"`
	// Limit 0, left out or negative is a page of ports.DefaultPage, as the
	// ports read it: Go facades of earlier releases send a port's negative
	// limit as it is, and an old facade must work with a new engine.
	Limit  int    `json:"limit,omitempty"`
	Cursor string `json:"cursor,omitempty"`
}

// KVKeys answers list_keys; Cursor is "" on the last page.
type KVKeys struct {
	Keys   []string `json:"keys"`
	Cursor string   `json:"cursor"`
}

// Set answers set_if_absent; Deleted answers delete and delete_if_value;
// Exists answers exists.
type (
	Set struct {
		Set bool `json:"set"`
	}
	Deleted struct {
		Deleted bool `json:"deleted"`
	}
	Exists struct {
		Exists bool `json:"exists"`
	}
	// Empty answers operations with nothing to say.
	Empty struct{}
)
