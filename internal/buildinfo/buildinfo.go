// Package buildinfo holds the product's version, set at link time with
// -ldflags "-X airgapcoder/internal/buildinfo.version=vX.Y.Z". Everything that
// reports a version (coder --version, /api/v2/buildinfo, provisioner and
// agent registration) reads it here.
package buildinfo

var version = "v0.1.0-devel"

// Version returns the product version.
func Version() string { return version }
