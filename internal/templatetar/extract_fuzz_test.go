package templatetar

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// FuzzExtract runs Extract on every input, where FuzzValidate extracts only
// what Validate accepted: the provisioner does not rely on the upload check,
// so Extract must hold on its own.
//
// Properties: Extract never writes outside its folder, whatever it is fed
// (the folder's parent is checked after each input); on failure it leaves
// the folder empty, as documented; it accepts exactly what Validate
// accepts, and refuses the rest with the same package error.
//
// Every input gets the same folder (work/out), so that file system paths do
// not vary between runs of one input: the fuzzer keeps inputs that reach
// new code, and random temporary names would make it keep noise.
func FuzzExtract(f *testing.F) {
	addSeeds(f)
	f.Add(craft(f, file("a/b/c/d/e.tf", "deep"), file("a/b/x.tf", "x")))
	// A failure after files were written: the clean-up must empty the folder.
	f.Add(craft(f, file("mod/a.tf", "a"), file("main.tf", "m"), file("mod/a.tf", "again")))
	f.Add(craft(f, dirEntry("mod/"), file("mod/a.tf", "a"), file("../escape.tf", "x")))

	work := f.TempDir()
	parent := filepath.Join(work, "p")
	dir := filepath.Join(parent, "out")
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := os.RemoveAll(parent); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		_, verr := Validate(bytes.NewReader(data), fuzzMax)
		err := Extract(bytes.NewReader(data), dir, fuzzMax)
		if err != nil {
			assertOnlyEmptyOut(t, parent)
		} else {
			assertOnlyOut(t, parent)
			readTree(t, dir) // Fails on anything but files and folders.
		}
		switch {
		case (err == nil) != (verr == nil):
			t.Fatalf("Validate: %v; Extract: %v", verr, err)
		case sentinel(err) != sentinel(verr):
			t.Fatalf("Validate: %v; Extract: %v: not the same package error", verr, err)
		case err != nil && sentinel(err) == nil:
			t.Fatalf("Extract error %q wraps no package error", err)
		}
	})
}
