package builder

import (
	"context"
	"debug/buildinfo"
	"debug/elf"
	"debug/macho"
	"debug/pe"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"runtime"

	"airgapcoder/bundle"
	airbuildinfo "airgapcoder/internal/buildinfo"
	"airgapcoder/mirror"
)

// hostPlatform is the build host's platform.
func hostPlatform() mirror.Platform { return mirror.Platform{OS: runtime.GOOS, Arch: runtime.GOARCH} }

// errNotExecutable is executablePlatform's answer for a file that has no
// executable header at all.
var errNotExecutable = errors.New("not an executable (no ELF, Mach-O or PE header)")

// executablePlatform reads the platform an executable was built for from
// its header (ELF: linux, Mach-O: darwin, PE: windows), without running it.
// Its errors do not name path: the caller does.
func executablePlatform(path string) (mirror.Platform, error) {
	f, err := os.Open(path)
	if err != nil {
		return mirror.Platform{}, err
	}
	defer f.Close()
	head := make([]byte, 4)
	if _, err := io.ReadFull(f, head); err != nil {
		return mirror.Platform{}, errNotExecutable
	}
	unknown := errors.New("an executable for an architecture this build does not know")
	switch {
	case string(head) == "\x7fELF":
		ef, err := elf.NewFile(f)
		if err != nil {
			return mirror.Platform{}, fmt.Errorf("read the executable header: %w", err)
		}
		arch, ok := map[elf.Machine]string{elf.EM_X86_64: "amd64", elf.EM_AARCH64: "arm64", elf.EM_386: "386", elf.EM_ARM: "arm"}[ef.Machine]
		if !ok {
			return mirror.Platform{}, unknown
		}
		return mirror.Platform{OS: "linux", Arch: arch}, nil
	case string(head[:2]) == "MZ":
		pf, err := pe.NewFile(f)
		if err != nil {
			return mirror.Platform{}, fmt.Errorf("read the executable header: %w", err)
		}
		arch, ok := map[uint16]string{pe.IMAGE_FILE_MACHINE_AMD64: "amd64", pe.IMAGE_FILE_MACHINE_ARM64: "arm64"}[pf.Machine]
		if !ok {
			return mirror.Platform{}, unknown
		}
		return mirror.Platform{OS: "windows", Arch: arch}, nil
	}
	if mf, err := macho.NewFile(f); err == nil {
		arch, ok := map[macho.Cpu]string{macho.CpuAmd64: "amd64", macho.CpuArm64: "arm64"}[mf.Cpu]
		if !ok {
			return mirror.Platform{}, unknown
		}
		return mirror.Platform{OS: "darwin", Arch: arch}, nil
	}
	return mirror.Platform{}, errNotExecutable
}

var ldflagsVersion = regexp.MustCompile(`airgapcoder/internal/buildinfo\.version=([^\s'"]+)`)

// coderVersion reads the version a coder binary was linked with from its
// Go build information (the -X flag the Makefile passes), without running
// it, so it works for every platform.
func coderVersion(path string, self bool) string {
	if self {
		return airbuildinfo.Version()
	}
	info, err := buildinfo.ReadFile(path)
	if err != nil {
		return "unknown"
	}
	for _, s := range info.Settings {
		if s.Key == "-ldflags" {
			if m := ldflagsVersion.FindStringSubmatch(s.Value); m != nil {
				return m[1]
			}
		}
	}
	return "unknown"
}

// fetchCoder copies every coder binary into bin/.
func (b *builder) fetchCoder(ctx context.Context) error {
	for _, src := range b.cfg.Coder {
		path := src.Path
		if src.Self {
			exe, err := os.Executable()
			if err != nil {
				return fmt.Errorf("%s: find the running binary: %w", src.Origin, err)
			}
			path = exe
		}
		plat := slashPlatform(src.Platform)
		dst := bundle.CoderPath(plat)
		sum, err := b.stageFile(path, dst, 0o755)
		if err != nil {
			return fmt.Errorf("%s: %w", src.Origin, err)
		}
		b.mu.Lock()
		b.comp.Coder = append(b.comp.Coder, bundle.Binary{Platform: plat, Path: dst, Version: coderVersion(path, src.Self), SHA256: sum})
		b.mu.Unlock()
		b.progress.logf("coder %s: %s", plat, path)
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	return nil
}
