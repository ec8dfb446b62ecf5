package cli

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"airgapcoder/internal/golden"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// helpDir holds one golden file per command: the command path with
// underscores, e.g. coder_appliance_up.golden.
var helpDir = filepath.Join("testdata", "help")

// TestHelpGolden runs `coder … --help` for the root and every command that
// cobra lists (hidden and deprecated ones are left out, as cobra leaves them
// out of help) and compares the output with testdata/help/. A golden file
// whose command is gone fails the test too. After changing commands or
// flags, rewrite them all with
//
//	go test ./cli/ -run TestHelpGolden -update
//
// and read the diff: it is what users will see.
func TestHelpGolden(t *testing.T) {
	// Not parallel: t.Setenv. Defaults that come from the machine are
	// pinned so that every machine writes the same files: the config and
	// cache folders (HOME, XDG_*; Linux conventions) and the host name.
	if runtime.GOOS != "linux" {
		t.Skipf("the golden files hold Linux default folders; this is %s", runtime.GOOS)
	}
	t.Setenv("HOME", "/home/coder")
	t.Setenv("XDG_CONFIG_HOME", "")
	t.Setenv("XDG_CACHE_HOME", "")

	paths := helpCommandPaths(helpRoot(nil))
	if len(paths) < 2 {
		t.Fatalf("got commands %q, want the root and its subcommands", paths)
	}
	files := make(map[string]bool, len(paths))
	for _, path := range paths {
		name := strings.ReplaceAll(path, " ", "_") + ".golden"
		files[name] = true
		t.Run(name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			root := helpRoot(&invocation{stdin: strings.NewReader(""), stdout: &stdout, stderr: &stderr})
			root.SetArgs(append(strings.Fields(path)[1:], "--help"))
			if err := root.Execute(); err != nil {
				t.Fatalf("%s --help: %v\nstderr:\n%s", path, err, &stderr)
			}
			if stderr.Len() > 0 {
				t.Errorf("%s --help wrote to stderr:\n%s", path, &stderr)
			}
			golden.Check(t, filepath.Join(helpDir, name), stdout.Bytes(), *update)
		})
	}

	entries, err := os.ReadDir(helpDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if files[e.Name()] {
			continue
		}
		stale := filepath.Join(helpDir, e.Name())
		if *update {
			if err := os.Remove(stale); err != nil {
				t.Error(err)
			}
			continue
		}
		t.Errorf("%s belongs to no command; %s", stale, golden.Rerun(t))
	}
}

// helpRoot returns the root command of inv (a fresh invocation when nil)
// with the host name in flag defaults replaced by "<hostname>".
func helpRoot(inv *invocation) *cobra.Command {
	if inv == nil {
		inv = &invocation{stdin: strings.NewReader(""), stdout: &bytes.Buffer{}, stderr: &bytes.Buffer{}}
	}
	root := inv.root()
	host, err := os.Hostname()
	if err != nil || host == "" {
		return root
	}
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		for _, fs := range []*pflag.FlagSet{c.PersistentFlags(), c.Flags()} {
			fs.VisitAll(func(f *pflag.Flag) {
				if f.DefValue == host {
					f.DefValue = "<hostname>"
				}
			})
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	return root
}

// helpCommandPaths returns the command path of root and of every command
// below it that cobra shows in help, depth first.
func helpCommandPaths(root *cobra.Command) []string {
	paths := []string{root.CommandPath()}
	for _, c := range root.Commands() {
		if c.IsAvailableCommand() {
			paths = append(paths, helpCommandPaths(c)...)
		}
	}
	return paths
}
