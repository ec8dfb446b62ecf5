// Package bytesize formats byte counts for people in binary (IEC) units:
// "512 B", "1.5 KiB", "12 MiB", "4.0 GiB". Below ten of a unit it shows one
// decimal, from ten on a whole number (go-humanize's IBytes). It adapts the
// project's int64 sizes to humanize; it only formats, it never parses (a
// bundle part size is parsed by bundle.ParseSize).
package bytesize

import "github.com/dustin/go-humanize"

// Format returns n in binary units, with a minus sign when n is negative.
func Format(n int64) string {
	if n < 0 {
		// -n overflows for math.MinInt64, but uint64 of the overflowed
		// value is still its magnitude, 1<<63.
		return "-" + humanize.IBytes(uint64(-n))
	}
	return humanize.IBytes(uint64(n))
}
