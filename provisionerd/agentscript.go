package provisionerd

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"strings"
)

// The agent init script. The coder/coder provider sets coder_agent's
// init_script to the value of CODER_AGENT_SCRIPT_<os>_<arch> after replacing
// two placeholders: ${ACCESS_URL} with the access URL (the provider's url,
// default CODER_AGENT_URL) with a trailing slash, and ${AUTH_TYPE} with the
// agent's auth ("token" unless the template says otherwise). The daemon
// writes one script per platform it can serve; the scripts do not depend on
// the job, and they never contain the agent token: templates pass
// coder_agent.<name>.token to the workspace as CODER_AGENT_TOKEN.
//
// For linux and darwin the script is POSIX sh that
//
//  1. writes the agent CA bundle (AgentCACertFile, embedded when the daemon
//     starts) into a new temporary folder;
//  2. downloads ${ACCESS_URL}bin/coder-<os>-<arch> there with curl
//     (--cacert) or else wget (--ca-certificate), retrying with backoff
//     (1 s doubling to 30 s) because coderd may still be starting, and gives
//     up with a message after CODER_AGENT_DOWNLOAD_TIMEOUT seconds (300
//     unless the workspace sets it);
//  3. exports CODER_AGENT_URL (the access URL without the trailing slash),
//     CODER_AGENT_FALLBACK_URL when the daemon has one, CODER_AGENT_AUTH
//     and, when a CA was embedded, SSL_CERT_FILE (the
//     embedded CAs followed by the image's own bundle when it has one, so
//     that the agent trusts coderd and programs started from the workspace
//     still trust what the image trusts), and execs `coder agent`.
//
// For windows it is PowerShell that downloads
// ${ACCESS_URL}bin/coder-windows-<arch>.exe with curl.exe (--cacert when a
// CA was embedded) or Invoke-WebRequest, with the same retries and the same
// fallback, and sets the same variables but SSL_CERT_FILE. Go on
// Windows reads the system store, not SSL_CERT_FILE: with an internal CA,
// a Windows image must trust it already.
//
// The provider's arch armv7 downloads coder-linux-arm, the GOARCH name
// coderd serves the 32-bit ARM agent under.
//
// The fallback URL (Options.AgentFallbackURL: the primary's, when the
// access URL is a region's workspace proxy) is written into the scripts as
// text, not left to a placeholder (the provider replaces only its own two)
// nor to the environment (templates start the agent with a clean one:
// `env -i` in examples/templates/process, a container's own elsewhere). A
// download from the access URL that fails is tried at once from the
// fallback URL (a proxy redirects /bin/ to the primary, so this matters
// only while the proxy is down), and the agent gets it as
// CODER_AGENT_FALLBACK_URL (package agent, endpoints.go).

// agentPlatform is an os/arch pair as the provider's coder_agent spells it
// (os: linux, darwin, windows; arch: amd64, arm64, armv7).
type agentPlatform struct{ OS, Arch string }

// agentPlatforms are the platforms the daemon writes init scripts for:
// every os/arch coder_agent accepts for which coderd can serve an agent.
var agentPlatforms = []agentPlatform{
	{"linux", "amd64"}, {"linux", "arm64"}, {"linux", "armv7"},
	{"darwin", "amd64"}, {"darwin", "arm64"},
	{"windows", "amd64"}, {"windows", "arm64"},
}

// The provider's placeholders.
const (
	placeholderAccessURL = "${ACCESS_URL}"
	placeholderAuthType  = "${AUTH_TYPE}"
)

// maxEnvString is what Linux allows for one "NAME=value" environment string
// (MAX_ARG_STRLEN, 32 pages); the script also travels into the workspace,
// often through another environment variable, so keep a margin.
const maxEnvString = 128 << 10

// maxAgentCA is the largest CA bundle the scripts may carry.
const maxAgentCA = maxEnvString - 16<<10

// caDelimiter ends the CA here-document; PEM never has such a line.
const caDelimiter = "CODER_CA_PEM_EOF"

// agentScriptEnv returns CODER_AGENT_SCRIPT_<os>_<arch> for every
// platform; fallbackURL is "" for none.
func agentScriptEnv(caPEM, fallbackURL string) map[string]string {
	env := make(map[string]string, len(agentPlatforms))
	for _, p := range agentPlatforms {
		env[agentScriptVar(p)] = agentScript(p, caPEM, fallbackURL)
	}
	return env
}

func agentScriptVar(p agentPlatform) string {
	return "CODER_AGENT_SCRIPT_" + p.OS + "_" + p.Arch
}

// binaryName is the file coderd serves the agent for p under.
func binaryName(p agentPlatform) string {
	arch := p.Arch
	if arch == "armv7" {
		arch = "arm"
	}
	name := "coder-" + p.OS + "-" + arch
	if p.OS == "windows" {
		name += ".exe"
	}
	return name
}

// agentScript returns the init script for p; caPEM and fallbackURL are ""
// for none.
func agentScript(p agentPlatform, caPEM, fallbackURL string) string {
	if fallbackURL != "" {
		fallbackURL = strings.TrimSuffix(fallbackURL, "/") + "/"
	}
	if p.OS == "windows" {
		return agentScriptWindows(p, caPEM, fallbackURL)
	}
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	w("#!/bin/sh\n")
	w("# Starts the coder agent: downloads it from coderd and execs it. Written by\n")
	w("# the provisioner (%s). The agent token is not in this\n", agentScriptVar(p))
	w("# script: the workspace passes it as CODER_AGENT_TOKEN.\n")
	w("set -eu\n\n")
	w("access_url='%s'\n", placeholderAccessURL)
	w("BINARY_URL=\"${access_url}bin/%s\"\n", binaryName(p))
	if fallbackURL != "" {
		w("# Where the agent reaches coderd while the access URL does not answer.\n")
		w("fallback_url=%s\n", shellQuote(fallbackURL))
		w("FALLBACK_BINARY_URL=\"${fallback_url}bin/%s\"\n", binaryName(p))
	}
	w("# Seconds to keep retrying the download: coderd may be starting.\n")
	w(": \"${CODER_AGENT_DOWNLOAD_TIMEOUT:=300}\"\n\n")
	w("BINARY_DIR=$(mktemp -d \"${TMPDIR:-/tmp}/coder.XXXXXX\")\n")
	w("BINARY_PATH=\"$BINARY_DIR/coder\"\n")
	curlCA, wgetCA := "", ""
	if caPEM != "" {
		w("CA_FILE=\"$BINARY_DIR/ca.pem\"\n")
		w("cat >\"$CA_FILE\" <<'%s'\n%s", caDelimiter, caPEM)
		if !strings.HasSuffix(caPEM, "\n") {
			w("\n")
		}
		w("%s\n", caDelimiter)
		curlCA, wgetCA = ` --cacert "$CA_FILE"`, ` --ca-certificate="$CA_FILE"`
	}
	w(`
fetch() {
	if command -v curl >/dev/null 2>&1; then
		curl -fsSL --connect-timeout 10%s -o "$BINARY_PATH.part" "$1"
	elif command -v wget >/dev/null 2>&1; then
		wget -q -T 30%s -O "$BINARY_PATH.part" "$1"
	else
		echo "coder init: neither curl nor wget is installed in this workspace" >&2
		exit 1
	fi
}
`, curlCA, wgetCA)
	if fallbackURL != "" {
		w(`
download() {
	fetch "$BINARY_URL" && return 0
	echo "coder init: downloading $BINARY_URL failed; trying $FALLBACK_BINARY_URL" >&2
	fetch "$FALLBACK_BINARY_URL"
}
`)
	} else {
		w(`
download() {
	fetch "$BINARY_URL"
}
`)
	}
	w(`
start=$(date +%%s)
delay=1
until download; do
	elapsed=$(($(date +%%s) - start))
	if [ "$elapsed" -ge "$CODER_AGENT_DOWNLOAD_TIMEOUT" ]; then
		echo "coder init: could not download the agent from $BINARY_URL for ${elapsed}s; check that this workspace reaches $access_url and trusts its certificate" >&2
		exit 1
	fi
	echo "coder init: downloading $BINARY_URL failed; retrying in ${delay}s" >&2
	sleep "$delay"
	if [ "$delay" -lt 30 ]; then delay=$((delay * 2)); fi
done
mv "$BINARY_PATH.part" "$BINARY_PATH"
chmod +x "$BINARY_PATH"

export CODER_AGENT_URL="${access_url%%/}"
export CODER_AGENT_AUTH='%s'
# The agent removes this folder when it exits: a workspace that runs on
# its host (not in a container) would otherwise keep a copy per start.
export CODER_AGENT_BINARY_DIR="$BINARY_DIR"
`, placeholderAuthType)
	if fallbackURL != "" {
		w("export CODER_AGENT_FALLBACK_URL=\"${fallback_url%%/}\"\n")
	}
	if caPEM != "" {
		// The agent and what the workspace starts from it trust the embedded
		// CAs and whatever the image already trusted.
		w(`for f in /etc/ssl/certs/ca-certificates.crt /etc/pki/tls/certs/ca-bundle.crt /etc/ssl/ca-bundle.pem /etc/ssl/cert.pem; do
	if [ -r "$f" ]; then
		cat "$f" >>"$CA_FILE"
		break
	fi
done
export SSL_CERT_FILE="$CA_FILE"
`)
	}
	w("exec \"$BINARY_PATH\" agent\n")
	return b.String()
}

// agentScriptWindows is the PowerShell variant of agentScript.
func agentScriptWindows(p agentPlatform, caPEM, fallbackURL string) string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	w("# Starts the coder agent: downloads it from coderd and runs it. Written by\n")
	w("# the provisioner (%s). The agent token is not in this\n", agentScriptVar(p))
	w("# script: the workspace passes it as CODER_AGENT_TOKEN.\n")
	w("$ErrorActionPreference = 'Stop'\n")
	w("$ProgressPreference = 'SilentlyContinue'\n")
	w("$CoderURL = '%s'\n", placeholderAccessURL)
	w("$BinaryURL = $CoderURL + 'bin/%s'\n", binaryName(p))
	w("$FallbackURL = %s\n", powerShellQuote(fallbackURL))
	w("$FallbackBinaryURL = $FallbackURL + 'bin/%s'\n", binaryName(p))
	w("$Timeout = 300\n")
	w("if ($env:CODER_AGENT_DOWNLOAD_TIMEOUT) { $Timeout = [int]$env:CODER_AGENT_DOWNLOAD_TIMEOUT }\n")
	w("$Dir = Join-Path ([System.IO.Path]::GetTempPath()) ('coder-' + [guid]::NewGuid())\n")
	w("New-Item -ItemType Directory -Path $Dir | Out-Null\n")
	w("$Binary = Join-Path $Dir 'coder.exe'\n")
	w("$CAFile = ''\n")
	if caPEM != "" {
		w("$CAFile = Join-Path $Dir 'ca.pem'\n")
		w("Set-Content -Path $CAFile -Encoding ascii -Value @'\n%s'@\n", strings.TrimRight(caPEM, "\n")+"\n")
	}
	w(`
function Get-AgentFrom($Url) {
	$curl = Get-Command curl.exe -ErrorAction SilentlyContinue
	if ($curl) {
		$curlArgs = @('-fsSL', '--connect-timeout', '10', '-o', $Binary, $Url)
		if ($CAFile) { $curlArgs = @('--cacert', $CAFile) + $curlArgs }
		& $curl.Source @curlArgs
		return ($LASTEXITCODE -eq 0)
	}
	try {
		Invoke-WebRequest -UseBasicParsing -Uri $Url -OutFile $Binary
		return $true
	} catch {
		return $false
	}
}

function Get-Agent {
	if (Get-AgentFrom $BinaryURL) { return $true }
	if (-not $FallbackURL) { return $false }
	Write-Host "coder init: downloading $BinaryURL failed; trying $FallbackBinaryURL"
	return (Get-AgentFrom $FallbackBinaryURL)
}

$Start = Get-Date
$Delay = 1
while (-not (Get-Agent)) {
	$Elapsed = [int]((Get-Date) - $Start).TotalSeconds
	if ($Elapsed -ge $Timeout) {
		Write-Error "coder init: could not download the agent from $BinaryURL for ${Elapsed}s; check that this workspace reaches $CoderURL and trusts its certificate"
		exit 1
	}
	Write-Host "coder init: downloading $BinaryURL failed; retrying in ${Delay}s"
	Start-Sleep -Seconds $Delay
	if ($Delay -lt 30) { $Delay = $Delay * 2 }
}

$env:CODER_AGENT_URL = $CoderURL.TrimEnd('/')
if ($FallbackURL) { $env:CODER_AGENT_FALLBACK_URL = $FallbackURL.TrimEnd('/') }
$env:CODER_AGENT_AUTH = '%s'
& $Binary agent
exit $LASTEXITCODE
`, placeholderAuthType)
	return b.String()
}

// shellQuote quotes s for POSIX sh, in single quotes.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// powerShellQuote quotes s for PowerShell, in single quotes.
func powerShellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}

// readCABundle reads a PEM file and returns its certificates re-encoded as
// PEM (comments and other blocks dropped, so the result is safe to embed in
// a here-document), after checking that each parses.
func readCABundle(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	var out strings.Builder
	n := 0
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		if _, err := x509.ParseCertificate(block.Bytes); err != nil {
			return "", fmt.Errorf("parse %s: %w", path, err)
		}
		n++
		_ = pem.Encode(&out, &pem.Block{Type: "CERTIFICATE", Bytes: block.Bytes})
	}
	if n == 0 {
		return "", errors.New(path + " holds no PEM certificate")
	}
	return out.String(), nil
}

// errAgentCATooLarge says a CA bundle would not fit in an init script.
var errAgentCATooLarge = errors.New("too large to carry in agent init scripts")

// loadAgentCA reads the CA bundle the init scripts carry.
func loadAgentCA(path string) (string, error) {
	pemText, err := readCABundle(path)
	if err != nil {
		return "", err
	}
	if len(pemText) > maxAgentCA {
		return "", fmt.Errorf("%s: %d KiB of certificates is %w (an init script travels in an environment variable, which Linux caps at %d KiB; the limit for the CAs is %d KiB): use a file with only the CAs that sign coderd's certificate",
			path, len(pemText)>>10, errAgentCATooLarge, maxEnvString>>10, maxAgentCA>>10)
	}
	return pemText, nil
}
