# The two commands that matter: `make run` (the control plane on its built-in
# PostgreSQL) and `make test` (every test, with the prerequisites installed).

GO        ?= go
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null | sed 's/^\([^v]\)/v0.1.0-devel+\1/' || echo v0.1.0-devel)
LDFLAGS   := -s -w -X airgapcoder/internal/buildinfo.version=$(VERSION)
RUN_DIR   ?= $(CURDIR)/.run
ADDRESS   ?= 127.0.0.1:3000

# The official Coder Terraform provider, built from the module pinned in
# tools/go.mod and packed into the provider mirror at build/providers/ for the
# build host's platform, under its real address.
PROVIDER_SOURCE  ?= registry.terraform.io/coder/coder
PROVIDER_VERSION ?= $(shell sed -n 's|^[[:space:]]*github.com/coder/terraform-provider-coder/v2 v||p' tools/go.mod | cut -d' ' -f1)
PROVIDER_OS      ?= $(shell $(GO) env GOOS)
PROVIDER_ARCH    ?= $(shell $(GO) env GOARCH)

.PHONY: all deps build run run-server test test-fast test-e2e bench fuzz clean web-vendor docs

all: build

deps:
	./scripts/install-deps.sh

build:
	# Static (no cgo): the same binary is the agent that every workspace
	# image downloads, glibc or not.
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o build/coder ./cmd/coder
	cd tools && GOOS=$(PROVIDER_OS) GOARCH=$(PROVIDER_ARCH) $(GO) build -trimpath -ldflags '-s -w' \
		-o ../build/terraform-provider-coder github.com/coder/terraform-provider-coder/v2
	rm -rf build/providers
	$(GO) run ./internal/tools/providermirror -dir build/providers -source $(PROVIDER_SOURCE) \
		-version $(PROVIDER_VERSION) -os $(PROVIDER_OS) -arch $(PROVIDER_ARCH) -binary build/terraform-provider-coder

# The main job: build a bundle from local sources, install it into
# $(RUN_DIR)/appliance and boot the appliance, offline.
run: deps build
	RUN_DIR=$(RUN_DIR) ADDRESS=$(ADDRESS) ./scripts/run-appliance.sh

# The control plane alone on its built-in PostgreSQL (no bundle).
run-server: deps build
	@mkdir -p $(RUN_DIR) && chmod 755 $(RUN_DIR)
	./build/coder server --http-address $(ADDRESS) --global-config $(RUN_DIR)/config --cache-dir $(RUN_DIR)/cache \
		--provider-mirror $(CURDIR)/build/providers

# Every test, against real PostgreSQL: the built-in one and Debian's, which
# this target starts on loopback for the external-database tests. What tests
# keep (the dashboard's screenshots) lands in build/test-output/_artifacts/.
test: deps
	@set -e; url=$$(./scripts/test-postgres.sh start); \
	trap './scripts/test-postgres.sh stop' EXIT; \
	mkdir -p $(CURDIR)/build/test-output; \
	CODER_TEST_POSTGRES_URL="$$url" $(GO) test -count=1 -timeout 40m -artifacts -outputdir $(CURDIR)/build/test-output ./...

# The fast tier: unit tests and parsers, in under two minutes. -short skips
# every test that needs PostgreSQL, a built binary, a browser, HAProxy,
# terraform, Hydra, Gitea or network namespaces, or that takes seconds
# (internal/testtier; each skip says why). Results are cached: packages that
# did not change are not run again (GOFLAGS=-count=1 runs them all). make
# test is what CI runs.
test-fast:
	$(GO) test -short -timeout 5m ./...

# Every benchmark, each with the iterations it needs, then one table of
# ratios against their goals (bench/benchtable). The raw output stays in
# build/bench.txt. Not part of CI: these machines are too noisy to assert
# timings; the table is for people.
bench: deps
	@set -e; url=$$(./scripts/test-postgres.sh start); \
	trap './scripts/test-postgres.sh stop' EXIT; \
	export CODER_TEST_POSTGRES_URL="$$url"; mkdir -p build; out=$(CURDIR)/build/bench.txt; : > "$$out"; \
	run() { $(GO) test -run '^$$' -timeout 60m "$$@" | tee -a "$$out"; }; \
	run ./bench/ -bench 'PortForwardIperf3|PortForwardAcrossReplicas|SSHCat|Load200Agents|Load5000Agents|IdleRelayedConnections|WorkspaceProxySSHRoundTrip' -benchtime 1x; \
	run ./bench/ -bench Soak -benchtime 1x; \
	run ./bench/ -bench PortForwardConnect -benchtime 300x; \
	run ./bench/ -bench 'BundleBuildImages|MirrorPull|ApplianceDeltaInstall' -benchtime 3x; \
	run ./bench/ -bench 'JobClaimLatency|ListWorkspaces10k|ProcessWorkspaceBuild|EnqueueToProvisionerStart' -benchtime 20x; \
	run ./bundle/ -bench 'Verify/Mixed|DeltaInstall' -benchtime 3x; \
	run ./bundle/builder/ -bench BuildImages -benchtime 3x; \
	run ./mirror/ -bench 'ImagePull|TerraformInit' -benchtime 5x; \
	run ./coderd/site/ -bench WorkspaceList1000 -benchtime 5x; \
	echo; $(GO) run ./bench/benchtable < "$$out"

# Every fuzz target for FUZZTIME each, one after the other (a quick pass:
# make fuzz FUZZTIME=30s). A crasher is written to the package's
# testdata/fuzz/<target>/; the other targets still run, and the target fails
# at the end. A run that ends in "context deadline exceeded" without a
# crasher is Go 1.26's coordinator racing its own -fuzztime deadline
# (golang/go#75804, fixed in Go 1.27), not a finding: it is reported, not
# failed. Each input that reaches new code is minimized for at most
# FUZZMINIMIZETIME (Go's default, 60s per input, starves the bundle targets,
# whose inputs are files of a few KiB).
FUZZTIME         ?= 10m
FUZZMINIMIZETIME ?= 100x
FUZZ_TARGETS := \
	./bundle/:FuzzReadBundle ./bundle/:FuzzReadPartIndex ./bundle/:FuzzParseManifest ./bundle/builder/:FuzzParseConfig \
	./internal/templatetar/:FuzzValidate ./internal/templatetar/:FuzzExtract \
	./appliance/:FuzzLoadConfig ./relayconn/:FuzzReadFrame \
	./mirror/:FuzzParseImageRef ./coderd/:FuzzParseDevURL

# Rewrites the generated parts of docs/ (the package graph in
# docs/architecture.md); a test fails when they are stale.
docs:
	go test -run TestArchitecturePackageGraph -update -count=1 .

fuzz:
	@failed=; log=$$(mktemp); trap 'rm -f "$$log" "$$log.rc"' EXIT; \
	for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; name=$${t##*:}; \
		echo "== $$name ($$pkg), $(FUZZTIME)"; \
		{ $(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZETIME) $$pkg; \
			echo $$? > "$$log.rc"; } 2>&1 | tee "$$log"; \
		[ "$$(cat "$$log.rc")" = 0 ] && continue; \
		if ! grep -q 'Failing input written to' "$$log" && tail -n 5 "$$log" | grep -q '^    context deadline exceeded$$'; then \
			echo "fuzz: $$name: no crasher; Go's coordinator missed its own deadline (golang/go#75804), not a finding"; \
		else \
			failed="$$failed $$name"; \
		fi; \
	done; \
	if [ -n "$$failed" ]; then echo "fuzz: failed:$$failed"; exit 1; fi

clean:
	rm -rf build

# The dashboard's vendored browser code (xterm.js): npm ci from
# web/package-lock.json, then copy into coderd/site/static/vendor/ (committed;
# the build and tests never run npm). Run after changing web/package.json.
web-vendor:
	./scripts/web-vendor.sh

# The product end to end: a bundle built from local sources, installed and
# run inside a network namespace with only a loopback interface (root).
test-e2e: deps
	$(GO) test -tags e2e -count=1 -timeout 20m -v ./e2e/
