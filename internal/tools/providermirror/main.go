// Command providermirror adds one provider executable to a provider mirror
// tree (see package airgapcoder/mirror). The Makefile uses it to lay out
// build/providers/ for the official Coder provider:
//
//	go run ./internal/tools/providermirror -dir build/providers \
//	    -source registry.terraform.io/coder/coder -version 2.20.0 \
//	    -os linux -arch amd64 -binary build/terraform-provider-coder
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime"

	"airgapcoder/mirror"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "providermirror:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("providermirror", flag.ContinueOnError)
	dir := fs.String("dir", "", "the mirror tree to add to (created if missing)")
	source := fs.String("source", "", "the provider's source address, such as coder.internal/appliance/coder")
	version := fs.String("version", "", "the provider's version, such as 0.1.0")
	goos := fs.String("os", runtime.GOOS, "the executable's operating system")
	goarch := fs.String("arch", runtime.GOARCH, "the executable's architecture")
	binary := fs.String("binary", "", "the provider executable")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dir == "" || *source == "" || *version == "" || *binary == "" {
		return errors.New("-dir, -source, -version and -binary are required")
	}
	addr, err := mirror.ParseProviderAddress(*source)
	if err != nil {
		return err
	}
	return mirror.AddProvider(*dir, addr, *version, mirror.Platform{OS: *goos, Arch: *goarch}, *binary)
}
