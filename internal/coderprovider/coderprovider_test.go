package coderprovider

import (
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"airgapcoder/internal/testtier"
)

func TestVersionIsThePin(t *testing.T) {
	v, err := Version()
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^2\.\d+\.\d+$`).MatchString(v) {
		t.Errorf("Version: got %q, want a v2 release such as 2.20.0", v)
	}
}

// The built binary is a Terraform plugin: run by hand it says so.
func TestBinaryIsTheProvider(t *testing.T) {
	testtier.Heavy(t, "builds the Coder Terraform provider")
	bin, err := Binary()
	if err != nil {
		t.Fatal(err)
	}
	out, _ := exec.Command(bin).CombinedOutput()
	if !strings.Contains(string(out), "plugin") {
		t.Errorf("running %s by hand printed %q; want go-plugin's notice that it is a plugin", bin, out)
	}
}
