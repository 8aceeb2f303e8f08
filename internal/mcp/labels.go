package mcp

// hasLabels reports whether labels has every key of want with its value.
// list_sandboxes filters here: the daemon's ?label= filter refuses keys it
// could never have, which a model would only be told about as no match.
func hasLabels(labels, want map[string]string) bool {
	for k, v := range want {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}
