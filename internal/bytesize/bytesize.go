// Package bytesize formats byte counts for people: binary units with one
// decimal ("512 B", "1.5 KiB", "4.0 GiB"). It only formats; it never parses.
package bytesize

import "fmt"

// Format returns n in binary units.
func Format(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 5; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
