package bytesize_test

import (
	"math"
	"testing"

	"airgapcoder/internal/bytesize"
)

func TestFormat(t *testing.T) {
	for _, tt := range []struct {
		n    int64
		want string
	}{
		{0, "0 B"},
		{1023, "1023 B"},
		{1024, "1.0 KiB"},
		{1536, "1.5 KiB"},
		{10 << 10, "10 KiB"},
		{1<<20 - 1, "1024 KiB"},
		{5 << 20, "5.0 MiB"},
		{12<<20 + 600<<10, "13 MiB"},
		{1 << 30, "1.0 GiB"},
		{4 << 30, "4.0 GiB"},
		{3 << 40, "3.0 TiB"},
		{math.MaxInt64, "8.0 EiB"},
		{-1536, "-1.5 KiB"},
		{math.MinInt64, "-8.0 EiB"},
	} {
		if got := bytesize.Format(tt.n); got != tt.want {
			t.Errorf("Format(%d) = %q, want %q", tt.n, got, tt.want)
		}
	}
}
