package provider

import (
	"fmt"
	"strings"
)

// initScriptInput is what an agent's init script depends on.
type initScriptInput struct {
	URL   string // access URL, no trailing slash
	OS    string // linux, darwin or windows
	Arch  string
	CAPEM string // CA certificates to embed; "" for none
}

// caDelimiter ends the CA here-document; PEM never has such a line.
const caDelimiter = "CODER_CA_PEM_EOF"

// initScript returns the script that downloads and starts the agent: POSIX
// sh for linux and darwin, PowerShell for windows. See the package
// documentation for what it does.
func initScript(in initScriptInput) string {
	if in.OS == "windows" {
		return initScriptWindows(in)
	}
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	w("#!/bin/sh\n")
	w("# Starts the coder agent: downloads it from the control plane and execs it.\n")
	w("# Written by the %s Terraform provider. The agent token is not in\n", Address)
	w("# this script: the workspace passes it as CODER_AGENT_TOKEN.\n")
	w("set -eu\n\n")
	w("CODER_URL=%s\n", shQuote(in.URL))
	w("BINARY_URL=%s\n", shQuote(fmt.Sprintf("%s/bin/coder-%s-%s", in.URL, in.OS, in.Arch)))
	w("# Seconds to keep retrying the download: the control plane may be starting.\n")
	w(": \"${CODER_AGENT_DOWNLOAD_TIMEOUT:=300}\"\n\n")
	w("BINARY_DIR=$(mktemp -d \"${TMPDIR:-/tmp}/coder.XXXXXX\")\n")
	w("BINARY_PATH=\"$BINARY_DIR/coder\"\n")
	curlCA, wgetCA := "", ""
	if in.CAPEM != "" {
		w("CA_FILE=\"$BINARY_DIR/ca.pem\"\n")
		w("cat >\"$CA_FILE\" <<'%s'\n%s", caDelimiter, in.CAPEM)
		if !strings.HasSuffix(in.CAPEM, "\n") {
			w("\n")
		}
		w("%s\n", caDelimiter)
		curlCA, wgetCA = ` --cacert "$CA_FILE"`, ` --ca-certificate="$CA_FILE"`
	}
	w(`
download() {
	if command -v curl >/dev/null 2>&1; then
		curl -fsSL --connect-timeout 10%s -o "$BINARY_PATH.part" "$BINARY_URL"
	elif command -v wget >/dev/null 2>&1; then
		wget -q -T 30%s -O "$BINARY_PATH.part" "$BINARY_URL"
	else
		echo "coder init: neither curl nor wget is installed in this workspace" >&2
		exit 1
	fi
}

start=$(date +%%s)
delay=1
until download; do
	elapsed=$(($(date +%%s) - start))
	if [ "$elapsed" -ge "$CODER_AGENT_DOWNLOAD_TIMEOUT" ]; then
		echo "coder init: could not download the agent from $BINARY_URL for ${elapsed}s; check that this workspace reaches $CODER_URL and trusts its certificate" >&2
		exit 1
	fi
	echo "coder init: downloading $BINARY_URL failed; retrying in ${delay}s" >&2
	sleep "$delay"
	if [ "$delay" -lt 30 ]; then delay=$((delay * 2)); fi
done
mv "$BINARY_PATH.part" "$BINARY_PATH"
chmod +x "$BINARY_PATH"

export CODER_AGENT_URL="$CODER_URL"
`, curlCA, wgetCA)
	if in.CAPEM != "" {
		w("export SSL_CERT_FILE=\"$CA_FILE\"\n")
	}
	w("exec \"$BINARY_PATH\" agent\n")
	return b.String()
}

// initScriptWindows is the PowerShell variant of initScript.
func initScriptWindows(in initScriptInput) string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	w("# Starts the coder agent: downloads it from the control plane and runs it.\n")
	w("# Written by the %s Terraform provider. The agent token is not in\n", Address)
	w("# this script: the workspace passes it as CODER_AGENT_TOKEN.\n")
	w("$ErrorActionPreference = 'Stop'\n")
	w("$ProgressPreference = 'SilentlyContinue'\n")
	w("$CoderURL = %s\n", psQuote(in.URL))
	w("$BinaryURL = %s\n", psQuote(fmt.Sprintf("%s/bin/coder-windows-%s.exe", in.URL, in.Arch)))
	w("$Timeout = 300\n")
	w("if ($env:CODER_AGENT_DOWNLOAD_TIMEOUT) { $Timeout = [int]$env:CODER_AGENT_DOWNLOAD_TIMEOUT }\n")
	w("$Dir = Join-Path ([System.IO.Path]::GetTempPath()) ('coder-' + [guid]::NewGuid())\n")
	w("New-Item -ItemType Directory -Path $Dir | Out-Null\n")
	w("$Binary = Join-Path $Dir 'coder.exe'\n")
	w("$CAFile = ''\n")
	if in.CAPEM != "" {
		w("$CAFile = Join-Path $Dir 'ca.pem'\n")
		w("Set-Content -Path $CAFile -Encoding ascii -Value @'\n%s'@\n", strings.TrimRight(in.CAPEM, "\n")+"\n")
	}
	w(`
function Get-Agent {
	$curl = Get-Command curl.exe -ErrorAction SilentlyContinue
	if ($curl) {
		$curlArgs = @('-fsSL', '--connect-timeout', '10', '-o', $Binary, $BinaryURL)
		if ($CAFile) { $curlArgs = @('--cacert', $CAFile) + $curlArgs }
		& $curl.Source @curlArgs
		return ($LASTEXITCODE -eq 0)
	}
	try {
		Invoke-WebRequest -UseBasicParsing -Uri $BinaryURL -OutFile $Binary
		return $true
	} catch {
		return $false
	}
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

$env:CODER_AGENT_URL = $CoderURL
if ($CAFile) { $env:SSL_CERT_FILE = $CAFile }
& $Binary agent
exit $LASTEXITCODE
`)
	return b.String()
}

// shQuote quotes s for POSIX sh.
func shQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// psQuote quotes s for PowerShell.
func psQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}
