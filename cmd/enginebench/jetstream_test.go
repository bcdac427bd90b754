package main

// jetstreamFields are the jetstream scenario's.
var jetstreamFields = []string{
	"js_kv_get_rps", "js_natskv_get_rps", "js_kv_set_rps", "js_natskv_put_rps", "doc_find_1k_ms", "doc_find_10k_ms",
}
