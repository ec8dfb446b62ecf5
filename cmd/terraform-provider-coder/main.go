// Command terraform-provider-coder is the project's Terraform provider,
// coder.internal/appliance/coder (see package airgapcoder/provider). Terraform
// starts it as a plugin; it is not meant to be run by hand.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/hashicorp/terraform-plugin-framework/providerserver"

	"airgapcoder/provider"
)

// version is set by the Makefile: -ldflags '-X main.version=$(PROVIDER_VERSION)'.
var version = "0.0.0-dev"

func main() {
	err := providerserver.Serve(context.Background(), provider.New(version), providerserver.ServeOpts{
		Address: provider.Address,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "terraform-provider-coder:", err)
		os.Exit(1)
	}
}
