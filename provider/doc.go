// Package provider implements the project's Terraform provider,
// coder.internal/appliance/coder, with terraform-plugin-framework. Every
// template uses it to declare the workspace's agent and apps and to learn the
// context of the build it runs in:
//
//	resource    coder_agent        the agent: id, token and the init script that starts it
//	resource    coder_app          an app the agent exposes (a URL or a port)
//	data source coder_workspace    the workspace being built (name, owner, transition, …)
//	data source coder_provisioner  the provisioner running the build (os, arch, tags)
//
// The provider owns nothing remote: it must not talk to the network. It only
// computes values from its configuration and its environment; the control
// plane learns about agents and apps by reading the Terraform state after a
// build. Identifiers and tokens are random UUIDs created once and kept in the
// state (an update never changes them).
//
// Templates declare it as
//
//	terraform {
//	  required_providers {
//	    coder = { source = "coder.internal/appliance/coder" }
//	  }
//	}
//
// # Environment
//
// The provisioner hands the workspace context to the provider through
// environment variables (Terraform passes its environment on to providers).
// Every variable is optional, so that a developer can run `terraform plan` on
// a template by hand; the defaults are in the last column.
//
//	Variable                       Meaning                                          Default
//	CODER_URL                      the deployment's access URL (http or https),      http://127.0.0.1:3000
//	                               which the agent downloads from and connects to    (and a warning on coder_agent)
//	CODER_WORKSPACE_ID             the workspace's UUID                              00000000-0000-0000-0000-000000000000
//	CODER_WORKSPACE_NAME           the workspace's name                              default
//	CODER_WORKSPACE_OWNER          the owner's user name                             default
//	CODER_WORKSPACE_OWNER_ID       the owner's UUID                                  00000000-0000-0000-0000-000000000000
//	CODER_WORKSPACE_TRANSITION     start or stop: what this build does               start
//	CODER_WORKSPACE_TEMPLATE_NAME  the template's name                               default
//	CODER_PROVISIONER_OS           the provisioner's OS (GOOS spelling)              runtime.GOOS of the provider
//	CODER_PROVISIONER_ARCH         the provisioner's architecture (GOARCH spelling)  runtime.GOARCH of the provider
//	CODER_PROVISIONER_TAGS         the provisioner's tags, a JSON object of strings  {}
//	CODER_CA_CERT_FILE             path of a PEM bundle of CA certificates that      none: the init script
//	                               the init script carries and trusts                uses the image's trust store
//
// The provider block's optional url argument overrides CODER_URL. A set but
// invalid variable (a transition other than start or stop, tags that are not
// a JSON object of strings, an unreadable CA file or one without a
// certificate) fails the provider's configuration with an error naming the
// variable.
//
// # The init script
//
// coder_agent.init_script is what a template runs inside the workspace (for
// example as a container's command) to start the agent. For linux and darwin
// it is a POSIX sh script that
//
//  1. writes the CA bundle from CODER_CA_CERT_FILE, embedded in the script as
//     a here-document when the plan was made, to a file in a new temporary
//     folder;
//  2. downloads <url>/bin/coder-<os>-<arch> into that folder with curl
//     (--cacert that file) or else wget (--ca-certificate), retrying with
//     backoff (1 s doubling up to 30 s) because the control plane may still
//     be starting, and failing with a message after
//     CODER_AGENT_DOWNLOAD_TIMEOUT seconds (300 unless the workspace sets it);
//  3. exports CODER_AGENT_URL=<url> and, when a CA was embedded,
//     SSL_CERT_FILE=<that file>, and execs `coder agent`.
//
// For windows it is a PowerShell script that downloads
// <url>/bin/coder-windows-<arch>.exe with curl.exe (--cacert when a CA was
// embedded) or Invoke-WebRequest, with the same retries. Go on Windows reads
// the system store, not SSL_CERT_FILE: with an internal CA, the Windows image
// must trust it already.
//
// The agent token is not in the script: templates pass coder_agent.token to
// the workspace as the environment variable CODER_AGENT_TOKEN. The token is
// sensitive, but `terraform show -json` and the state hold it in plain text;
// never log them.
package provider
