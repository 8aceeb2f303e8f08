// Package humanize formats sizes for people.
package humanize

import "fmt"

// Bytes formats n bytes with a binary unit: "512 B", "1.5 KiB", "2.0 GiB".
func Bytes(n int64) string {
	const unit = 1024
	if n < unit && n > -unit {
		return fmt.Sprintf("%d B", n)
	}
	sign := ""
	if n < 0 {
		sign, n = "-", -n
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 5; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%s%.1f %ciB", sign, float64(n)/float64(div), "KMGTPE"[exp])
}
