package templatetar

import (
	"archive/tar"
	"bytes"
	"errors"
	"path"
	"strings"
	"testing"
)

// fuzzMax is the size limit under fuzzing, small to keep runs fast.
const fuzzMax = 64 << 10

var sentinels = []error{ErrTooLarge, ErrUnsafePath, ErrUnsupportedType, ErrDuplicatePath, ErrNotTar, ErrEmpty}

// sentinel returns the package error that err wraps, or nil.
func sentinel(err error) error {
	for _, s := range sentinels {
		if errors.Is(err, s) {
			return s
		}
	}
	return nil
}

// addSeeds gives FuzzValidate and FuzzExtract the same seed corpus: the
// hostile archives of TestExtractRejects, archives of unusual but valid
// shapes ("./" names, a folder after its files, a pax global header) and
// one that Pack made.
func addSeeds(f *testing.F) {
	f.Helper()
	for _, tc := range hostileCases(f) {
		f.Add(tc.tar)
	}
	f.Add(craft(f, dirEntry("./"), file("./main.tf", "m"), dirEntry("./mod/"), file("./mod/a.tf", "a")))
	f.Add(craft(f, file("mod/a.tf", "a"), dirEntry("mod/"), file("run.sh", "#!/bin/sh\n")))
	f.Add(craft(f,
		tarEntry{hdr: tar.Header{Typeflag: tar.TypeXGlobalHeader, Name: "pax_global_header", PAXRecords: map[string]string{"comment": "abc"}}},
		file("main.tf", "m")))
	src := f.TempDir()
	writeTree(f, src, map[string]string{"main.tf": "m", "mod/a.tf": "a", "run.sh*": "#!/bin/sh\n", "empty/": ""})
	var packed bytes.Buffer
	if err := Pack(src, &packed, 0); err != nil {
		f.Fatal(err)
	}
	f.Add(packed.Bytes())
}

// FuzzValidate checks that Validate never panics, that every error it
// returns wraps a package error, and that whatever it accepts Extract
// writes inside the target folder only, exactly as summarised.
//
// Extract runs only on accepted archives: file system calls make coverage
// vary from run to run, which stalls the fuzzer if every input makes them.
// TestExtractRejects covers rejection and clean-up.
func FuzzValidate(f *testing.F) {
	addSeeds(f)

	f.Fuzz(func(t *testing.T, data []byte) {
		sum, err := Validate(bytes.NewReader(data), fuzzMax)
		if err != nil && sentinel(err) == nil {
			t.Fatalf("Validate error %q wraps no package error", err)
		}
		if err != nil {
			return
		}

		dir, parent := emptyDir(t)
		if err := Extract(bytes.NewReader(data), dir, fuzzMax); err != nil {
			t.Fatalf("Validate accepted the archive, Extract = %v", err)
		}
		assertOnlyOut(t, parent)
		got := readTree(t, dir) // Fails on anything but files and folders.
		listed := make(map[string]bool)
		for _, p := range sum.Paths {
			listed[p] = true
			if _, ok := got[p]; !ok {
				t.Errorf("summary lists %q, not extracted", p)
			}
		}
		var files int
		var size int64
		for p, v := range got {
			if !strings.HasSuffix(p, "/") {
				files++
				size += int64(len(v) - len("0644 "))
			}
			if !listed[p] && !isParent(p, sum.Paths) {
				t.Errorf("extracted %q, which the summary does not list", p)
			}
		}
		if files != sum.Files || size != sum.Bytes {
			t.Errorf("extracted %d files, %d bytes; summary says %d files, %d bytes", files, size, sum.Files, sum.Bytes)
		}
	})
}

// isParent reports whether dir (ending in "/") is a parent of one of paths.
func isParent(dir string, paths []string) bool {
	if !strings.HasSuffix(dir, "/") {
		return false
	}
	for _, p := range paths {
		if strings.HasPrefix(path.Clean(p), dir) {
			return true
		}
	}
	return false
}

// assertOnlyOut fails unless parent holds nothing but "out".
func assertOnlyOut(tb testing.TB, parent string) {
	tb.Helper()
	got := readTree(tb, parent)
	for p := range got {
		if p != "out/" && !strings.HasPrefix(p, "out/") {
			tb.Fatalf("Extract wrote %q outside its folder", p)
		}
	}
}
