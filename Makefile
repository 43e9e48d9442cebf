# SPDX-License-Identifier: Apache-2.0
# xlb build, test and benchmark entry points. Everything runs as root on Debian 12 (BPF, netns).

GO      ?= go
PKGS    ?= ./...
# Packages Debian must provide: the BPF toolchain, and the tools the tests drive (bird2 and frr:
# the real BGP routers bgp/speaker's tests peer with, each run inside a test namespace; nftables: the
# DNAT datapath bench/ compares xlb with, and what the failover tests silence links with;
# containerd and runc: the container runtime xlb's image is proven in, cmd/xlb's TestImage;
# mmdebstrap: the clean Debian root the package is installed into, internal/lab's TestDebPackage).
DEB_PKGS = clang-16 llvm-16 libbpf-dev bpftool iproute2 ethtool bird2 frr nftables containerd runc mmdebstrap
# prometheus: the real Prometheus and promtool the dashboards' and alerts' tests run
# (deploy/monitoring); shellcheck: make check's lint of the shell scripts.
DEB_PKGS += prometheus shellcheck
# curl: the lab's pods reach cluster IPs with it (through the node agents); curl and ping are
# also what a person uses to poke at the lab.
LAB_PKGS = curl iputils-ping
# qemu-system-x86 and busybox-static: make kernel-matrix boots Debian's kernels under QEMU (TCG)
# with a busybox initramfs (internal/vmtest).
VM_PKGS = qemu-system-x86 busybox-static
# The real cluster's nodes (internal/cluster): the CNI plugins (ptp, host-local), and the tools
# upstream's specs run in the test images (busybox, nc -v, GNU wget).
CLUSTER_PKGS = containernetworking-plugins busybox-static netcat-openbsd wget

export GOTOOLCHAIN ?= local

# CONFORMANCE_FOCUS is the ginkgo focus of make conformance.
CONFORMANCE_FOCUS ?= \[sig-network\] LoadBalancers

# VERSION is what `xlb version` says and the image's tag: the nearest tag, the commit, and
# "-dirty" for a tree with uncommitted changes.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo devel)
# XLB_BUILD links the version into xlb; -buildvcs=true records the commit (Go's default on
# machines that do not turn it off).
XLB_BUILD = $(GO) build -buildvcs=true -ldflags "-X main.version=$(VERSION)"

.PHONY: all help check spdx staticcheck-bin deps generate generate-api build vet check-generated kube-bins cluster-bins cluster-containerd conformance helm-bin manifests chart test e2e bench lab lab-down kernel-matrix image deb clean vagrant-box vagrant-prebuilt vagrant-check

all: build

## help: list the targets, one line each.
help:
	@sed -n 's/^## \([a-z][a-z0-9-]*\): \(.*\)/\1\t\2/p' $(firstword $(MAKEFILE_LIST)) | \
		awk -F'\t' '{ d = $$2; if (d !~ /\.$$/) d = d " ..."; printf "  %-17s %s\n", $$1, d }'

# The pure packages (no kernel, no Kubernetes client), which make check runs under the race
# detector (internal/doclinks: every link and anchor of the Markdown resolves).
PURE_PKGS = ./lb ./lb/config ./lb/health ./lb/ipam ./lb/maglev ./lb/reconcile ./bgp ./xdp/datapath \
	./internal/doclinks

## check: the lint tier, no root needed: gofmt, go vet, staticcheck, shellcheck, the SPDX
## headers, and the race detector on the pure packages.
check: staticcheck-bin
	@out="$$(gofmt -l $$(git ls-files '*.go'))"; test -z "$$out" || { echo "gofmt -w these files:" >&2; echo "$$out" >&2; exit 1; }
	$(GO) vet $(PKGS)
	./bin/staticcheck $(PKGS)
	shellcheck -S warning $$(git ls-files '*.sh') .ci/run
	$(GO) run ./internal/tools/spdx
	$(GO) test -race -count=1 $(PURE_PKGS)

## spdx: add the SPDX license header to every source file that lacks it (internal/tools/spdx).
spdx:
	$(GO) run ./internal/tools/spdx -fix

## staticcheck-bin: build staticcheck from its module (internal/tools/staticcheck) into bin/.
staticcheck-bin:
	$(GO) -C internal/tools/staticcheck build -o ../../../bin/staticcheck honnef.co/go/tools/cmd/staticcheck

## deps: install the Debian packages the build and the tests need (needs root).
deps:
	apt-get update -q
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q $(DEB_PKGS) $(LAB_PKGS) $(CLUSTER_PKGS)
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $(VM_PKGS)

## generate: compile the BPF C with clang-16 and regenerate the bpf2go bindings.
generate:
	$(GO) generate ./xdp/...
	$(GO) generate ./bench/...
	$(MAKE) generate-api

## generate-api: the CRDs (deploy/helm/xlb/crds) and deep-copy functions of the Kubernetes API
## (lb/kube/api) with controller-gen, built from its own module (internal/tools/controllergen).
generate-api:
	$(GO) -C internal/tools/controllergen build -o ../../../bin/controller-gen sigs.k8s.io/controller-tools/cmd/controller-gen
	rm -f deploy/helm/xlb/crds/xlb.dev_*.yaml
	./bin/controller-gen object paths=./lb/kube/api/... crd output:crd:dir=deploy/helm/xlb/crds

## build: build every package.
build:
	$(GO) build $(PKGS)

## vet: go vet every package (tests included).
vet:
	$(GO) vet $(PKGS)

## check-generated: fail if the committed bpf2go and controller-gen output differs from a fresh
## `make generate`.
check-generated: generate
	@git diff --exit-code --stat -- xdp/gateway/xlb_bpfel.go xdp/gateway/xlb_bpfel.o \
		bench/gen/gen_bpfel.go bench/gen/gen_bpfel.o bench/sink/sink_bpfel.go bench/sink/sink_bpfel.o \
		bench/redirect/redirect_bpfel.go bench/redirect/redirect_bpfel.o \
		xdp/afxdp/steer_bpfel.go xdp/afxdp/steer_bpfel.o \
		xdp/socklb/socklb_bpfel.go xdp/socklb/socklb_bpfel.o xdp/socklb/reap_bpfel.go xdp/socklb/reap_bpfel.o \
		xdp/dsr/dsr_bpfel.go xdp/dsr/dsr_bpfel.o \
		lb/kube/api/v1alpha1/zz_generated.deepcopy.go deploy/helm/xlb/crds || \
		{ echo "the committed generated code (bpf2go, controller-gen) is stale: run 'make generate' and commit it" >&2; exit 1; }
	@test -z "$$(git status --porcelain -- lb/kube/api/v1alpha1/zz_generated.deepcopy.go deploy/helm/xlb/crds)" || \
		{ echo "make generate made files that are not committed:" >&2; git status --porcelain -- lb/kube/api/v1alpha1/zz_generated.deepcopy.go deploy/helm/xlb/crds >&2; exit 1; }

## kube-bins: build kube-apiserver and etcd from the Go module proxy into a version-keyed cache
## (XLB_KUBE_BIN_DIR, default /var/cache/xlb/kube-v1.37.2) for internal/kubetest: ~8 min and
## ~3.5 GB of Go caches the first time, a no-op once cached. See docs/kubernetes-testing.md.
kube-bins:
	./internal/kubetest/kubebins/build.sh

## cluster-bins: build kubelet, kube-proxy, kube-controller-manager, kube-scheduler, kubectl,
## agnhost and e2e.test (sig-network specs only) from the Go module proxy into the same cache as
## kube-bins, for internal/cluster: 6.4 min after kube-bins on this 2-core machine, a no-op once
## cached.
cluster-bins: kube-bins cluster-containerd
	./internal/cluster/clusterbins/build.sh

## cluster-containerd: unpack Debian forky's containerd 2.1 (the node runtime of internal/cluster;
## bookworm's 1.6 is too old for kubelet 1.37) into /var/cache/xlb/containerd-2.1.9 with a
## private apt sources list: ~30 MB, a few seconds, a no-op once there.
cluster-containerd:
	./internal/cluster/containerd.sh

## conformance: bring up the real cluster with an xlb gateway as its LoadBalancer implementation
## and run upstream's [sig-network] LoadBalancers specs against it (root; after cluster-bins),
## printing the per-spec table (CONFORMANCE_OUT=file writes it as Markdown).
conformance: cluster-bins
	$(GO) run ./internal/cluster/conformance -focus '$(CONFORMANCE_FOCUS)' $(if $(CONFORMANCE_OUT),-out $(CONFORMANCE_OUT))

## helm-bin: build helm from its Go module (helm.sh/helm/v4) into a version-keyed cache
## (XLB_HELM_BIN_DIR, default /var/cache/xlb/helm-v4.3.2) for the chart's tests
## (internal/helmtest), make manifests and make chart: ~3.5 min of CPU (9 min on a busy
## 2-core machine) the first time, a no-op once cached. Only Go modules are fetched.
helm-bin:
	./internal/helmtest/helmbin/build.sh

## manifests: render deploy/agent.yaml and deploy/rbac.yaml from the Helm chart deploy/helm/xlb
## with its default values (internal/helmtest's TestManifests fails while they differ).
manifests: helm-bin
	$(GO) run ./cmd/xlb-manifests

## chart: package the Helm chart deploy/helm/xlb into bin/, its appVersion (the image tag it
## runs by default) the version make image tags the image with.
chart: helm-bin
	"$$(./internal/helmtest/helmbin/build.sh --path)" package deploy/helm/xlb --app-version $(VERSION) --destination bin

## test: everything, privileged tests included (run as root). The timeout is per package: the
## longest (internal/lab, xdp, cmd/xlb) take 8-10 min each on a loaded 2-core machine, and
## go test's default of 10 min cut cmd/xlb short in a CI run. The lint tier (make check) runs
## first: CI's run is clean of it too.
test: check check-generated kube-bins cluster-bins helm-bin
	$(GO) test -count=1 -timeout 60m $(PKGS)

## e2e: a real appliance in three namespaces (client, gateway with the XDP datapath, backend)
## forwarding real TCP and UDP through a VIP, then surviving a loader restart.
e2e:
	$(GO) test -count=1 -v -run 'TestE2E' ./xdp/gateway/
	$(GO) test -count=1 -v -run 'TestDaemonE2E' ./cmd/xlb/

## bench: throughput of xlb's XDP datapath next to a plain XDP redirect and nftables DNAT, in
## generator -> gateway -> sink namespaces (bench/README.md), with the control-plane numbers;
## results in bench/results/ (BENCH_FLAGS passes flags, e.g. BENCH_FLAGS=--quick). Then the
## per-packet datapath benchmarks (ns/pkt net of a trivial XDP program, BPF_PROG_TEST_RUN).
bench:
	$(GO) build -o bin/xlb-bench ./cmd/xlb-bench
	./bin/xlb-bench --out bench/results $(BENCH_FLAGS)
	$(GO) test -run '^$$' -bench . -benchtime 200000x -count 3 ./xdp/gateway/

## lab: a whole edge site in network namespaces (docs/lab.md): a client behind a router with
## ECMP to 2 gateways running xlb, a cluster L2 with 2 nodes and 5 pods, and (Kubernetes mode,
## the default) etcd + kube-apiserver with the Services of deploy/examples/, whose VIPs the
## gateways' xlb allocates and announces. Shows it working, then keeps it up until Ctrl-C.
## DEMO=1 runs the demonstration and exits (non-zero on failure), for CI. LAB_FLAGS passes more
## flags to xlb-lab (e.g. LAB_FLAGS="--gateways 3 --pods 8", LAB_FLAGS="--mode file").
lab: deps kube-bins
	mountpoint -q /sys/fs/bpf || mount -t bpf bpf /sys/fs/bpf
	$(XLB_BUILD) -o bin/xlb ./cmd/xlb
	$(GO) build -o bin/xlb-lab ./cmd/xlb-lab
	./bin/xlb-lab $(if $(filter-out 0 no false,$(DEMO)),demo,up) --xlb bin/xlb $(LAB_FLAGS)

## image: xlb's container image, built without a daemon (cmd/xlb-image, internal/ociimage): a
## static xlb (CGO_ENABLED=0, -trimpath) alone in one layer, labelled with its version and
## commit, reproducible, in bin/xlb-image.tar (an OCI archive naming xlb.dev/xlb:$(VERSION) and
## :latest; ctr images import, podman load, skopeo copy oci-archive:...).
image:
	CGO_ENABLED=0 $(GO) build -buildvcs=true -trimpath -ldflags "-s -w -X main.version=$(VERSION)" -o bin/xlb-static ./cmd/xlb
	$(GO) run ./cmd/xlb-image --binary bin/xlb-static --out bin/xlb-image.tar

## deb: the Debian package for appliance gateways (cmd/xlb-deb, internal/debpkg): the static
## xlb as /usr/bin/xlb, the systemd unit deploy/deb/xlb.service, /etc/xlb/xlb.yaml (a conffile,
## from deploy/xlb.example.yaml) and a man page from --help, in bin/xlb.deb.
deb:
	CGO_ENABLED=0 $(GO) build -buildvcs=true -trimpath -ldflags "-s -w -X main.version=$(VERSION)" -o bin/xlb-static ./cmd/xlb
	$(GO) run ./cmd/xlb-deb --binary bin/xlb-static --version $(VERSION) --out bin/xlb.deb

## vagrant-box: a Debian 12 vagrant-libvirt box built from apt packages (no box is downloaded).
VAGRANT_BOX ?= /var/cache/xlb/vagrant/xlb-bookworm64.box
vagrant-box:
	./deploy/vagrant/build-box.sh $(VAGRANT_BOX)

## vagrant-prebuilt: the Vagrant lab's heavy binaries built on the host (XLB_VAGRANT_PREBUILT).
VAGRANT_PREBUILT ?= /var/cache/xlb/vagrant/prebuilt
vagrant-prebuilt: kube-bins
	mkdir -p $(VAGRANT_PREBUILT)
	CGO_ENABLED=0 $(XLB_BUILD) -o $(VAGRANT_PREBUILT)/xlb ./cmd/xlb
	CGO_ENABLED=0 $(GO) build -o $(VAGRANT_PREBUILT)/xlb-lab ./cmd/xlb-lab
	cp -p $${XLB_KUBE_BIN_DIR:-/var/cache/xlb/kube-v1.37.2}/kube-apiserver $${XLB_KUBE_BIN_DIR:-/var/cache/xlb/kube-v1.37.2}/etcd $${XLB_KUBE_BIN_DIR:-/var/cache/xlb/kube-v1.37.2}/stamp $(VAGRANT_PREBUILT)/

## vagrant-check: `vagrant up` with the local box and prebuilt binaries through to the lab's
## demonstration (Kubernetes mode, XDP datapath; XLB_DEMO_FLAGS="--mode file" for the file-mode
## one), then everything torn down (root; without KVM ~7 min, +2-8 min to build the box; not in CI).
vagrant-check:
	./deploy/vagrant/check.sh

## kernel-matrix: boot Debian's kernels (5.10, 6.1, 6.12, newest 7.x) under QEMU/TCG, load every
## BPF program and run the datapaths' tests in each guest (internal/vmtest); the table goes to
## stdout and bench/results/kernel-matrix.md. MATRIX_FLAGS passes flags (e.g. --kernels 5.10,6.1).
kernel-matrix:
	$(GO) run ./cmd/xlb-kernel-matrix --out bench/results/kernel-matrix.md $(MATRIX_FLAGS)

## lab-down: remove what lab sites left behind (namespaces, pins, xlb processes, state under
## /run/xlb-lab) when their lab process is gone. ALL=1 removes running sites too.
lab-down:
	$(GO) build -o bin/xlb-lab ./cmd/xlb-lab
	./bin/xlb-lab down $(if $(filter-out 0 no false,$(ALL)),--all)

## clean: empty Go's test cache.
clean:
	$(GO) clean -testcache
