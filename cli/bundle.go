package cli

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"airgapcoder/bundle"
	"airgapcoder/internal/bytesize"
)

// bundleSubcommands are the children of `coder bundle`. bundle_build.go adds
// `build` from its init():
//
//	func init() { bundleSubcommands = append(bundleSubcommands, (*invocation).bundleBuildCmd) }
var bundleSubcommands = []func(*invocation) *cobra.Command{
	(*invocation).bundleKeygenCmd,
	(*invocation).bundleInspectCmd,
	(*invocation).bundleVerifyCmd,
	(*invocation).bundleExtractCmd,
}

// bundleKeyOptions map the verifying commands' key flag to the environment.
// --allow-unsigned deliberately has no variable: accepting unsigned bundles
// is a decision made on the command line, each time.
var bundleKeyOptions = options{
	{flag: "public-key", env: "CODER_BUNDLE_PUBLIC_KEY"},
}

func (inv *invocation) bundleCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bundle",
		Short: "Build, inspect, verify and unpack signed air-gap bundles",
		Long: `A bundle carries everything an offline appliance needs (coder, terraform,
PostgreSQL, a provider mirror, images, templates, CA certificates) in one signed
file, or in parts that fit removable media. The format and trust chain are
described in docs/bundle-format.md.`,
	}
	for _, sub := range bundleSubcommands {
		cmd.AddCommand(sub(inv))
	}
	return cmd
}

func (inv *invocation) bundleKeygenCmd() *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "keygen --output DIR",
		Short: "Write a new ed25519 signing key pair (bundle.key, bundle.pub)",
		Long: `Write bundle.key (the private key, mode 0600: keep it on the connected side)
and bundle.pub (give it to the offline side, out of band) into DIR. Existing
files are never overwritten.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if out == "" {
				return usageErrorf("--output DIR is required")
			}
			pubPath, keyPath, err := bundle.GenerateKey(out)
			if err != nil {
				return err
			}
			pub, err := bundle.LoadPublicKey(pubPath)
			if err != nil {
				return err
			}
			fmt.Fprintf(inv.stdout, "Private key: %s (sign with: coder bundle build --sign-key %s)\n", keyPath, keyPath)
			fmt.Fprintf(inv.stdout, "Public key:  %s (verify with: --public-key %s)\n", pubPath, pubPath)
			fmt.Fprintf(inv.stdout, "Key ID:      %s\n", bundle.KeyID(pub))
			return nil
		},
	}
	cmd.Flags().StringVar(&out, "output", "", "Folder to write bundle.key and bundle.pub into (created when missing)")
	return cmd
}

// inspectOutput is `coder bundle inspect -o json`.
type inspectOutput struct {
	Manifest bundle.Manifest `json:"manifest"`
	Info     bundle.Info     `json:"info"`
}

func (inv *invocation) bundleInspectCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "inspect FILE",
		Short: "Show a bundle's contents from its manifest, without reading the payload",
		Long: `Show what a bundle holds: components, versions, platforms and sizes. Only the
manifest is read (instant on a multi-GiB bundle) and nothing is verified: use
coder bundle verify for that. FILE is the .bundle, or the .part000 of a split one.`,
		Args: exactArgs(1, "FILE"),
	}
	format := outputFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		m, info, err := bundle.Inspect(args[0])
		if err != nil {
			return err
		}
		if *format == "json" {
			return render(inv.stdout, *format, inspectOutput{Manifest: m, Info: info}, nil, nil)
		}
		printBundleSummary(inv.stdout, &m, &info)
		fmt.Fprintln(inv.stdout)
		return render(inv.stdout, *format, nil, []string{"KIND", "NAME", "VERSION", "PLATFORMS", "SIZE", "DETAIL"},
			func() [][]string { return componentRows(&m) })
	}
	return cmd
}

func printBundleSummary(w io.Writer, m *bundle.Manifest, info *bundle.Info) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "Bundle:\t%s %s\n", m.Name, m.Release)
	fmt.Fprintf(tw, "Built:\t%s by coder %s\n", m.BuildTime.Format(time.RFC3339), m.ToolVersion)
	fmt.Fprintf(tw, "Platforms:\t%s\n", strings.Join(m.Platforms, ", "))
	signed := "no (unsigned build)"
	if m.Signed {
		signed = "yes, key " + m.KeyID + " (not checked by inspect: run coder bundle verify)"
	}
	fmt.Fprintf(tw, "Signed:\t%s\n", signed)
	size := bytesize.Format(info.TotalSize)
	if len(info.Parts) > 0 {
		size += " in " + plural(len(info.Parts), "part")
	}
	fmt.Fprintf(tw, "Size:\t%s\n", size)
	fmt.Fprintf(tw, "Payload:\t%d files, %s unpacked\n", len(m.Files), bytesize.Format(m.PayloadSize()))
	if d := info.Delta; d != nil {
		fmt.Fprintf(tw, "Delta:\tagainst %s %s: carries %d of %d files, %s of the full bundle's %s (%.0f%%); the rest comes from that release, installed\n",
			d.Base.Name, d.Base.Release, len(m.Files)-len(d.Omitted), len(m.Files), bytesize.Format(d.CarriedSize), bytesize.Format(d.PayloadSize),
			100*float64(d.CarriedSize)/float64(max(d.PayloadSize, 1)))
	}
	tw.Flush()
}

// componentRows lists the manifest's components for the inspect table.
func componentRows(m *bundle.Manifest) [][]string {
	sizeUnder := func(prefix string, match func(string) bool) string {
		var n int64
		found := false
		for _, f := range m.Files {
			if (f.Path == prefix || strings.HasPrefix(f.Path, prefix+"/")) && (match == nil || match(f.Path)) {
				n += f.Size
				found = true
			}
		}
		if !found {
			return "-"
		}
		return bytesize.Format(n)
	}
	orDash := func(s string) string {
		if s == "" {
			return "-"
		}
		return s
	}
	var rows [][]string
	c := m.Components
	for _, b := range c.Coder {
		rows = append(rows, []string{"coder", b.Path, b.Version, b.Platform, sizeUnder(b.Path, nil), ""})
	}
	if t := c.Terraform; t != nil {
		for _, b := range t.Binaries {
			rows = append(rows, []string{"terraform", b.Path, t.Version, b.Platform, sizeUnder(b.Path, nil), "source " + t.Source})
		}
	}
	if p := c.Postgres; p != nil {
		for _, b := range p.Archives {
			rows = append(rows, []string{"postgres", b.Path, p.Version, b.Platform, sizeUnder(b.Path, nil), "source " + p.Source})
		}
	}
	for _, p := range c.Providers {
		match := func(path string) bool { return strings.Contains(path, "_"+p.Version+"_") }
		rows = append(rows, []string{"provider", p.Source, p.Version, strings.Join(p.Platforms, ","),
			sizeUnder(bundle.DirProviders+"/"+p.Source, match), orDash(p.Upstream)})
	}
	short := func(digest string) string {
		if len(digest) > 19 {
			return digest[:19]
		}
		return digest
	}
	for _, im := range c.Images {
		rows = append(rows, []string{"image", im.Ref, orDash(short(im.Digest)), strings.Join(im.Platforms, ","), "-", "layers shared: " + sizeUnder(bundle.DirImages, nil) + " for all images"})
		// What came along with it: signatures, attestations, SBOMs.
		for _, r := range im.Referrers {
			detail := "referrer (" + r.ArtifactType + ")"
			if r.Tag != "" {
				detail = "cosign tag " + r.Tag
			}
			if r.VerifiedWith != "" {
				detail += ", verified with " + r.VerifiedWith
			}
			rows = append(rows, []string{r.Kind, im.Ref, short(r.Digest), "-", "-", detail})
		}
	}
	for _, mod := range c.Modules {
		detail := mod.Upstream
		if mod.Subdir != "" {
			detail += " (module in " + mod.Subdir + "/)"
		}
		rows = append(rows, []string{"module", mod.Source, mod.Version, "-", sizeUnder(mod.Path, nil), detail})
	}
	for _, t := range c.Templates {
		detail := ""
		if len(t.Providers) > 0 || len(t.Images) > 0 {
			detail = fmt.Sprintf("uses %d provider(s), %d image(s)", len(t.Providers), len(t.Images))
		}
		rows = append(rows, []string{"template", t.Name, "-", "-", sizeUnder(t.Path, nil), detail})
	}
	for _, ct := range c.Certs {
		detail := ct.Subject
		if !ct.NotAfter.IsZero() {
			detail += ", until " + ct.NotAfter.Format("2006-01-02")
		}
		rows = append(rows, []string{"cert", ct.Path, "-", "-", sizeUnder(ct.Path, nil), strings.TrimPrefix(detail, ", ")})
	}
	return rows
}

func (inv *invocation) bundleVerifyCmd() *cobra.Command {
	var (
		keyPath       string
		allowUnsigned bool
	)
	cmd := &cobra.Command{
		Use:   "verify FILE [--public-key KEY] [--allow-unsigned]",
		Short: "Check a bundle's signature and every file's hash",
		Long: `Check the signature (with --public-key), every part of a split bundle, and
every payload file's size and sha256, reading the bundle once. Exit status 1
names the bad file or part. Without --public-key only the hashes are checked,
which proves the bundle is intact but not who built it. With --public-key an
unsigned bundle fails unless --allow-unsigned is given.`,
		Args: exactArgs(1, "FILE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := bundleKeyOptions.resolve(cmd, "", inv.environ); err != nil {
				return err
			}
			pub, err := optionalPublicKey(keyPath)
			if err != nil {
				return err
			}
			m, info, err := bundle.Inspect(args[0])
			if err != nil {
				return err
			}
			checkKey := pub
			var note string
			switch {
			case pub == nil && m.Signed:
				fmt.Fprintf(inv.stderr, "warning: signature not checked: pass --public-key (signed by key %s)\n", m.KeyID)
				note = "signature NOT checked"
			case pub == nil:
				note = "unsigned bundle"
			case !m.Signed && allowUnsigned:
				fmt.Fprintln(inv.stderr, "warning: the bundle is unsigned (accepted: --allow-unsigned); checking hashes only")
				checkKey, note = nil, "unsigned bundle"
			case m.Signed:
				note = "signature OK (key " + bundle.KeyID(pub) + ")"
			}
			p := newProgressLine(inv.stderr, "verify")
			err = bundle.Verify(cmd.Context(), args[0], checkKey, p.update)
			p.finish()
			if err != nil {
				return err
			}
			if d := info.Delta; d != nil {
				fmt.Fprintf(inv.stdout, "OK: %s %s, a delta against %s: the %d files it carries and %s match the manifest (the other %d come from %s at install); %s\n",
					m.Name, m.Release, d.Base.Release, len(m.Files)-len(d.Omitted), partsPhrase(&info), len(d.Omitted), d.Base.Release, note)
				return nil
			}
			fmt.Fprintf(inv.stdout, "OK: %s %s: %d files (%s) and %s match the manifest; %s\n",
				m.Name, m.Release, len(m.Files), bytesize.Format(m.PayloadSize()), partsPhrase(&info), note)
			return nil
		},
	}
	cmd.Flags().StringVar(&keyPath, "public-key", "", "The builder's bundle.pub: check the signature (CODER_BUNDLE_PUBLIC_KEY)")
	cmd.Flags().BoolVar(&allowUnsigned, "allow-unsigned", false, "With --public-key, accept an unsigned bundle (hashes are still checked)")
	return cmd
}

// optionalPublicKey loads the --public-key file at path; without one (an
// empty path) there is no key to check a signature with.
func optionalPublicKey(path string) (ed25519.PublicKey, error) {
	if path == "" {
		return nil, nil
	}
	return bundle.LoadPublicKey(path)
}

func partsPhrase(info *bundle.Info) string {
	if len(info.Parts) == 0 {
		return "the bundle's structure"
	}
	return "all " + plural(len(info.Parts), "part")
}

// plural is "1 part", "2 parts".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

func (inv *invocation) bundleExtractCmd() *cobra.Command {
	var (
		keyPath, dir  string
		allowUnsigned bool
	)
	cmd := &cobra.Command{
		Use:   "extract FILE --dir DIR (--public-key KEY | --allow-unsigned)",
		Short: "Verify a bundle while unpacking it into DIR; nothing is left in DIR on failure",
		Long: `Unpack the payload into a staging folder beside DIR, checking the signature
first and every file's hash as it is written, and move it to DIR only when all
checks pass. DIR must not exist or be empty. Either --public-key (the builder's
bundle.pub) or --allow-unsigned (check hashes only) is required.`,
		Args: exactArgs(1, "FILE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := bundleKeyOptions.resolve(cmd, "", inv.environ); err != nil {
				return err
			}
			if dir == "" {
				return usageErrorf("--dir DIR is required")
			}
			switch {
			case keyPath == "" && !allowUnsigned:
				return usageErrorf("pass --public-key KEY to check the signature, or --allow-unsigned to check hashes only")
			case keyPath != "" && allowUnsigned:
				return usageErrorf("--public-key and --allow-unsigned exclude each other")
			}
			pub, err := optionalPublicKey(keyPath)
			if err != nil {
				return err
			}
			m, err := bundle.Extract(cmd.Context(), args[0], dir, pub, allowUnsigned)
			if errors.Is(err, bundle.ErrNotEmpty) {
				return usageErrorf("--dir %s is not empty: extract into a new or empty folder", dir)
			}
			if err != nil {
				return err
			}
			how := "signature and hashes checked"
			if pub == nil {
				how = "hashes checked, signature not checked (--allow-unsigned)"
			}
			fmt.Fprintf(inv.stdout, "Extracted %s %s into %s: %d files, %s (%s)\n",
				m.Name, m.Release, dir, len(m.Files), bytesize.Format(m.PayloadSize()), how)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&dir, "dir", "", "Folder to unpack into: must not exist, or be empty")
	f.StringVar(&keyPath, "public-key", "", "The builder's bundle.pub (CODER_BUNDLE_PUBLIC_KEY)")
	f.BoolVar(&allowUnsigned, "allow-unsigned", false, "Accept a bundle without checking its signature (hashes are still checked)")
	return cmd
}

// progressLine shows a long operation's progress on stderr: one redrawn line
// on a terminal (at most 10 times a second); otherwise, for logs, a plain
// line every 5 seconds once it has run that long, so quick runs print nothing.
type progressLine struct {
	w        io.Writer
	verb     string
	tty      bool
	start    time.Time
	last     time.Time
	drawn    bool
	interval time.Duration
}

func newProgressLine(w io.Writer, verb string) *progressLine {
	p := &progressLine{w: w, verb: verb, tty: writerIsTerminal(w), start: time.Now(), interval: 5 * time.Second}
	if p.tty {
		p.interval = 100 * time.Millisecond
	}
	p.last = p.start
	return p
}

func (p *progressLine) update(done, total int64) {
	now := time.Now()
	if now.Sub(p.last) < p.interval {
		return
	}
	p.last = now
	pct := 0.0
	if total > 0 {
		pct = 100 * float64(done) / float64(total)
	}
	rate := float64(done) / now.Sub(p.start).Seconds()
	line := fmt.Sprintf("%s: %s of %s (%.0f%%, %s/s)", p.verb, bytesize.Format(done), bytesize.Format(total), pct, bytesize.Format(int64(rate)))
	if p.tty {
		fmt.Fprintf(p.w, "\r\033[K%s", line)
		p.drawn = true
		return
	}
	fmt.Fprintln(p.w, line)
}

// finish clears the terminal line.
func (p *progressLine) finish() {
	if p.drawn {
		fmt.Fprint(p.w, "\r\033[K")
	}
}

// writerIsTerminal reports whether w is a terminal (see term_*.go).
func writerIsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && isTerminal(f)
}
