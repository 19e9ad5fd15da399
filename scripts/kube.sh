#!/usr/bin/env bash
# Brings up a real single-node Kubernetes cluster for the tests of the Kubernetes backend, or
# takes it down (`kube.sh down`), idempotently: a component already running is left alone.
#
# Everything is built from pinned modules (tools/kubernetes: the control plane, kubelet and
# kubectl at one release; tools/etcd; a pause process of our own) and cached outside the
# checkout, keyed by those modules, so only the first run pays the build (about 10-20 minutes
# on 2 cores). The node lives in a network namespace of its own, airlock-k8s, so that neither
# the host's firewall nor the Docker engine's is changed: etcd, the API server, the controller
# manager, the scheduler, a second containerd (Debian's, with its CRI plugin; Docker's own is not
# touched) and the kubelet run in it, pods get addresses on a CNI bridge there (POD_CIDR), and a
# veth pair joins it to the host: the host end (HOST_ADDR) is where an airlock node on the host
# serves the pods' gateway and resolver, the node end (NODE_ADDR) the cluster's node address and
# API server. The host gets one route, to POD_CIDR through the node end, so the gateway sees
# each pod by its own address. Images come from the local Docker engine (KUBE_IMAGES), imported
# into the cluster's containerd; there is no registry.
#
# Writes $KUBE_STATE/env (KUBECONFIG, HOST_ADDR, NODE_ADDR, POD_CIDR, NETNS, CONTAINERD) for
# the tests, and $KUBE_STATE/admin.kubeconfig. Logs are in $KUBE_STATE/log.
set -euo pipefail
cd "$(dirname "$0")/.."
cache=${AIRLOCK_CACHE:-/var/cache/airlock}
state=${KUBE_STATE:-/var/lib/airlock/kube}
netns=airlock-k8s
host_addr=10.251.0.1
node_addr=10.251.0.2
pod_cidr=10.244.0.0/24
service_cidr=10.96.0.0/24
images=${KUBE_IMAGES:-airlock/default:latest airlock/python:latest}
version=v1.34.4

in_ns() { nsenter --net="/run/netns/$netns" -- "$@"; }

# running reports whether the process in pidfile $1 is alive.
running() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

# waitfor waits up to $1 seconds for the command after it, saying what it waited for on failure.
waitfor() {
	local secs=$1 what=$2
	shift 2
	for _ in $(seq 1 $((secs * 4))); do
		"$@" >/dev/null 2>&1 && return 0
		sleep 0.25
	done
	echo "kube: $what did not happen within ${secs}s; see $state/log" >&2
	exit 1
}

stop() {
	local pf=$1
	if running "$pf"; then
		kill "$(cat "$pf")" 2>/dev/null || true
		for _ in $(seq 1 40); do running "$pf" || break; sleep 0.25; done
		running "$pf" && kill -9 "$(cat "$pf")" 2>/dev/null || true
	fi
	rm -f "$pf"
}

down() {
	if [ -f "$state/admin.kubeconfig" ] && running "$state/run/kube-apiserver.pid"; then
		"$bin/kubectl" --kubeconfig "$state/admin.kubeconfig" delete pods --all --all-namespaces --wait=true --timeout=60s >/dev/null 2>&1 || true
	fi
	for c in kubelet kube-scheduler kube-controller-manager kube-apiserver etcd containerd; do
		stop "$state/run/$c.pid"
	done
	# What the kubelet and the CRI left: shims of deleted pods are gone with them; mounts of the
	# kubelet's volumes are undone so the state can be removed.
	{ grep -o " $state/[^ ]*" /proc/mounts || true; } | sort -r | while read -r m; do umount -l "$m" 2>/dev/null || true; done
	ip route del "$pod_cidr" via "$node_addr" 2>/dev/null || true
	ip link del alk8s0 2>/dev/null || true
	ip netns del "$netns" 2>/dev/null || true
	rm -rf "$state"
	echo "kube: cluster removed"
}

key=$(cat tools/kubernetes/go.mod tools/kubernetes/go.sum tools/kubernetes/pause/main.go tools/etcd/go.mod tools/etcd/go.sum | sha256sum | cut -c1-16)
bin="$cache/kube-$key"
shimkey=$(cat tools/gvisor-shim/go.mod tools/gvisor-shim/go.sum "$0" | sha256sum | cut -c1-16)
shim="$cache/gvisor-shim-$shimkey/containerd-shim-runsc-v1"

if [ "${1:-up}" = down ]; then
	down
	exit 0
fi

# 1. Binaries, built once.
if [ ! -x "$bin/kubelet" ] || [ ! -x "$bin/etcd" ] || [ ! -x "$bin/pause" ]; then
	echo "kube: building Kubernetes $version, etcd and pause from tools/ (first time only; 10-20 minutes)"
	mkdir -p "$bin.tmp"
	ld="-s -w"
	for v in component-base/version client-go/pkg/version; do
		ld="$ld -X k8s.io/$v.gitVersion=$version -X k8s.io/$v.gitMajor=1 -X k8s.io/$v.gitMinor=34"
	done
	ld="$ld -X k8s.io/component-base/version.gitTreeState=clean -X k8s.io/component-base/version.buildDate=2026-01-01T00:00:00Z"
	(cd tools/kubernetes && CGO_ENABLED=0 nice go build -tags tools -trimpath -ldflags "$ld" -o "$bin.tmp/" \
		k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
		k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kubectl)
	(cd tools/kubernetes && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$bin.tmp/pause" ./pause)
	(cd tools/etcd && CGO_ENABLED=0 nice go build -tags tools -trimpath -ldflags "-s -w" -o "$bin.tmp/etcd" go.etcd.io/etcd/server/v3)
	rm -rf "$bin"
	mv "$bin.tmp" "$bin"
fi
# gVisor's containerd shim, vendored and patched for this machine (tools/gvisor-shim/README.md).
if [ ! -x "$shim" ]; then
	echo "kube: building gVisor's containerd shim from tools/gvisor-shim (first time only; about a minute)"
	work=$(mktemp -d)
	cp tools/gvisor-shim/go.mod tools/gvisor-shim/go.sum tools/gvisor-shim/tools.go "$work/"
	(cd "$work" && go mod vendor)
	patch_line() { # file old new: replaces one whole line, and fails unless exactly one matched
		local n
		n=$(grep -cxF -- "$2" "$1" || true)
		[ "$n" = 1 ] || { echo "kube: the shim patch expects one line '$2' in $1, found $n" >&2; exit 1; }
		OLD=$2 NEW=$3 perl -0pi -e 's/^\Q$ENV{OLD}\E$/$ENV{NEW}/m' "$1"
	}
	patch_line "$work/vendor/gvisor.dev/gvisor/pkg/shim/v1/manager.go" \
		$'\t\treturn shim.BootstrapParams{}, fmt.Errorf("failed to set OOM Score on shim: %w", err)' \
		$'\t\t_ = err // no CAP_SYS_RESOURCE here: the shim keeps its score'
	patch_line "$work/vendor/github.com/containerd/containerd/v2/pkg/shim/shim.go" \
		$'\t\tdata, err := json.Marshal(&params)' \
		$'\t\tdata, err, _ := []byte(params.Address), error(nil), json.Marshal // containerd 1.6 reads a bare address'
	mkdir -p "$(dirname "$shim")"
	(cd "$work" && CGO_ENABLED=0 go build -mod=vendor -trimpath -ldflags "-s -w" -o "$shim.tmp" gvisor.dev/gvisor/shim)
	mv "$shim.tmp" "$shim"
	rm -rf "$work"
fi
runsc=$(readlink -f bin/runsc 2>/dev/null || true)
[ -x "$runsc" ] || { echo "kube: bin/runsc is missing (make runsc builds it)" >&2; exit 1; }
ln -sfn "$shim" "$bin/containerd-shim-runsc-v1"
[ -x /usr/lib/cni/bridge ] || { echo "kube: Debian's CNI plugins are missing (make deps installs containernetworking-plugins)" >&2; exit 1; }
mkdir -p "$state"/{run,log,pki,cni/net.d,cni/ipam,containerd,kubelet,etcd-data,pod-logs}
chmod 700 "$state" "$state/pki"

# 2. The node's network namespace, joined to the host by a veth pair.
if [ ! -e "/run/netns/$netns" ]; then
	ip netns add "$netns"
fi
if ! ip link show alk8s0 >/dev/null 2>&1; then
	ip link add alk8s0 type veth peer name alk8s1
	ip link set alk8s1 netns "$netns"
	ip addr add "$host_addr/30" dev alk8s0
	ip link set alk8s0 up
	in_ns ip addr add "$node_addr/30" dev alk8s1
	in_ns ip link set alk8s1 up
	in_ns ip link set lo up
	in_ns ip route add default via "$host_addr"
fi
in_ns sysctl -qw net.ipv4.ip_forward=1
ip route replace "$pod_cidr" via "$node_addr"

# 3. Certificates: a CA, and one identity per component.
pki=$state/pki
cert() { # name subject [sans]
	local name=$1 subj=$2 sans=${3:-}
	[ -f "$pki/$name.crt" ] && return
	openssl genrsa -out "$pki/$name.key" 2048 2>/dev/null
	openssl req -new -key "$pki/$name.key" -subj "$subj" -out "$pki/$name.csr" 2>/dev/null
	local ext="$pki/$name.ext"
	echo "basicConstraints=CA:FALSE" >"$ext"
	echo "keyUsage=digitalSignature,keyEncipherment" >>"$ext"
	echo "extendedKeyUsage=serverAuth,clientAuth" >>"$ext"
	[ -n "$sans" ] && echo "subjectAltName=$sans" >>"$ext"
	openssl x509 -req -in "$pki/$name.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial \
		-days 3650 -extfile "$ext" -out "$pki/$name.crt" 2>/dev/null
}
if [ ! -f "$pki/ca.crt" ]; then
	openssl req -x509 -newkey rsa:2048 -nodes -keyout "$pki/ca.key" -subj "/CN=airlock-test-cluster" \
		-days 3650 -out "$pki/ca.crt" 2>/dev/null
fi
cert apiserver "/CN=kube-apiserver" "IP:127.0.0.1,IP:$node_addr,IP:10.96.0.1,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
cert admin "/O=system:masters/CN=admin"
cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client"
cert kcm "/CN=system:kube-controller-manager"
cert scheduler "/CN=system:kube-scheduler"
cert kubelet "/O=system:nodes/CN=system:node:airlock-node" "IP:$node_addr,DNS:airlock-node"
[ -f "$pki/sa.key" ] || { openssl genrsa -out "$pki/sa.key" 2048 2>/dev/null; openssl rsa -in "$pki/sa.key" -pubout -out "$pki/sa.pub" 2>/dev/null; }
kubeconfig() { # name cert
	cat >"$state/$1.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: airlock-test
  cluster: {server: "https://$node_addr:6443", certificate-authority: "$pki/ca.crt"}
users:
- name: $1
  user: {client-certificate: "$pki/$2.crt", client-key: "$pki/$2.key"}
contexts:
- name: airlock-test
  context: {cluster: airlock-test, user: $1}
current-context: airlock-test
EOF
}
kubeconfig admin admin
kubeconfig kcm kcm
kubeconfig scheduler scheduler
kubeconfig kubelet kubelet

# 4. containerd, a second instance with its own root, state and sockets.
sock=$state/containerd/containerd.sock
cat >"$state/runsc.toml" <<EOF
binary_name = "$runsc"
root = "$state/runsc-root"
EOF
cat >"$state/containerd/config.toml.new" <<EOF
version = 2
root = "$state/containerd/root"
state = "$state/containerd/state"
[grpc]
  address = "$sock"
[ttrpc]
  address = "$sock.ttrpc"
[debug]
  address = "$state/containerd/debug.sock"
[plugins."io.containerd.internal.v1.opt"]
  path = "$state/containerd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "k8s.local/pause:1"
  # This machine gives no CAP_SYS_RESOURCE: negative OOM scores are refused.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$state/cni/net.d"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
    # gVisor: the RuntimeClass gvisor (deploy/kubernetes/runtimeclass.yaml) names this handler.
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runsc]
      runtime_type = "io.containerd.runsc.v1"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runsc.options]
        TypeUrl = "io.containerd.runsc.v1.options"
        ConfigPath = "$state/runsc.toml"
EOF
# A containerd running on another configuration is restarted on this one (its Pods' shims run on).
if ! cmp -s "$state/containerd/config.toml.new" "$state/containerd/config.toml"; then
	stop "$state/run/containerd.pid"
	mv "$state/containerd/config.toml.new" "$state/containerd/config.toml"
else
	rm "$state/containerd/config.toml.new"
fi
cat >"$state/cni/net.d/10-airlock.conflist" <<EOF
{"cniVersion": "0.4.0", "name": "airlock-pods", "plugins": [
  {"type": "bridge", "bridge": "alk8s-pods", "isGateway": true, "ipMasq": false, "hairpinMode": true,
   "ipam": {"type": "host-local", "dataDir": "$state/cni/ipam", "ranges": [[{"subnet": "$pod_cidr"}]],
            "routes": [{"dst": "0.0.0.0/0"}]}},
  {"type": "loopback"}]}
EOF

# daemon name args...: starts name in the node's namespace unless it runs.
daemon() {
	local name=$1
	shift
	running "$state/run/$name.pid" && return
	# Not through in_ns: the pid recorded must be the daemon's own (nsenter and setsid exec it).
	nsenter --net="/run/netns/$netns" -- setsid "$@" >>"$state/log/$name.log" 2>&1 </dev/null &
	echo $! >"$state/run/$name.pid"
}
# PATH: containerd finds the runsc shim beside the cluster's binaries.
daemon containerd env PATH="$bin:$PATH" containerd --config "$state/containerd/config.toml"
ctr() { command ctr -a "$sock" -n k8s.io "$@"; }
waitfor 30 "containerd answering on $sock" ctr version

# 5. Images: pause, and the sandbox images, from the local engine.
if ! ctr images ls -q | grep -qx "k8s.local/pause:1"; then
	tmp=$(mktemp -d)
	cp "$bin/pause" "$tmp/pause"
	tar -C "$tmp" -c pause | docker import -c 'ENTRYPOINT ["/pause"]' - k8s.local/pause:1 >/dev/null
	rm -rf "$tmp"
	docker save k8s.local/pause:1 | ctr images import - >/dev/null
fi
mkdir -p "$state/images"
for img in $images; do
	id=$(docker image inspect --format '{{.Id}}' "$img" 2>/dev/null) || { echo "kube: image $img is not on the local engine (make image builds it)" >&2; exit 1; }
	mark="$state/images/$(echo "$img" | tr '/:' '__')"
	# Imported again only when the engine's image changed since (a rebuild).
	if [ "$(cat "$mark" 2>/dev/null)" != "$id" ]; then
		docker save "$img" | ctr images import --digests=false - >/dev/null
		echo "$id" >"$mark"
	fi
done

# 6. The control plane and the kubelet.
daemon etcd "$bin/etcd" --name airlock --data-dir "$state/etcd-data" \
	--listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
	--listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
	--initial-cluster airlock=http://127.0.0.1:2380 --listen-metrics-urls http://127.0.0.1:2381
waitfor 60 "etcd healthy" in_ns curl -sf http://127.0.0.1:2381/health
daemon kube-apiserver "$bin/kube-apiserver" --etcd-servers=http://127.0.0.1:2379 \
	--bind-address=0.0.0.0 --advertise-address="$node_addr" --secure-port=6443 \
	--tls-cert-file="$pki/apiserver.crt" --tls-private-key-file="$pki/apiserver.key" --client-ca-file="$pki/ca.crt" \
	--service-account-key-file="$pki/sa.pub" --service-account-signing-key-file="$pki/sa.key" \
	--service-account-issuer=https://kubernetes.default.svc --service-cluster-ip-range="$service_cidr" \
	--authorization-mode=Node,RBAC --enable-admission-plugins=NodeRestriction \
	--kubelet-client-certificate="$pki/apiserver-kubelet-client.crt" --kubelet-client-key="$pki/apiserver-kubelet-client.key" \
	--kubelet-preferred-address-types=InternalIP,Hostname --allow-privileged=true --profiling=false
kubectl() { "$bin/kubectl" --kubeconfig "$state/admin.kubeconfig" "$@"; }
waitfor 90 "the API server ready" kubectl get --raw /readyz
daemon kube-controller-manager "$bin/kube-controller-manager" --kubeconfig="$state/kcm.kubeconfig" \
	--authentication-kubeconfig="$state/kcm.kubeconfig" --authorization-kubeconfig="$state/kcm.kubeconfig" \
	--bind-address=127.0.0.1 --leader-elect=false --service-account-private-key-file="$pki/sa.key" \
	--root-ca-file="$pki/ca.crt" --use-service-account-credentials=true \
	--cluster-signing-cert-file="$pki/ca.crt" --cluster-signing-key-file="$pki/ca.key" --service-cluster-ip-range="$service_cidr" \
	--controllers='*,-nodeipam,-route,-cloud-node-lifecycle,-service-lb-controller'
daemon kube-scheduler "$bin/kube-scheduler" --kubeconfig="$state/scheduler.kubeconfig" \
	--authentication-kubeconfig="$state/scheduler.kubeconfig" --authorization-kubeconfig="$state/scheduler.kubeconfig" \
	--bind-address=127.0.0.1 --leader-elect=false
cat >"$state/kubelet-config.yaml.new" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $node_addr
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: "$pki/ca.crt"}
authorization: {mode: AlwaysAllow}
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix://$sock
failSwapOn: false
failCgroupV1: false
tlsCertFile: "$pki/kubelet.crt"
tlsPrivateKeyFile: "$pki/kubelet.key"
podLogsDir: "$state/pod-logs"
evictionHard: {"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
# What airlock's Pods set: IPv6 off (the node firewall is IPv4), and a pids bound per Pod.
allowedUnsafeSysctls: ["net.ipv6.conf.all.disable_ipv6", "net.ipv6.conf.default.disable_ipv6"]
podPidsLimit: 4096
EOF
# A kubelet running on another configuration is restarted on this one.
if ! cmp -s "$state/kubelet-config.yaml.new" "$state/kubelet-config.yaml"; then
	stop "$state/run/kubelet.pid"
	mv "$state/kubelet-config.yaml.new" "$state/kubelet-config.yaml"
else
	rm "$state/kubelet-config.yaml.new"
fi
daemon kubelet "$bin/kubelet" --config="$state/kubelet-config.yaml" --kubeconfig="$state/kubelet.kubeconfig" \
	--hostname-override=airlock-node --node-ip="$node_addr" --root-dir="$state/kubelet" --cert-dir="$state/kubelet/pki"
waitfor 60 "the kubelet healthy" in_ns curl -sf http://127.0.0.1:10248/healthz
waitfor 90 "the node Ready" kubectl wait --for=condition=Ready node/airlock-node --timeout=1s
waitfor 60 "the default service account" kubectl get serviceaccount default
# The RuntimeClass for gVisor templates, as the production manifests declare it.
kubectl apply -f deploy/kubernetes/runtimeclass.yaml >/dev/null
# The node's Pod network on its Node object, as a cluster that allocates one per node records
# it (the controller manager's own allocator is off: CNI's range is fixed above).
if [ -z "$(kubectl get node airlock-node -o jsonpath='{.spec.podCIDR}')" ]; then
	kubectl patch node airlock-node --type merge -p "{\"spec\":{\"podCIDR\":\"$pod_cidr\",\"podCIDRs\":[\"$pod_cidr\"]}}" >/dev/null
fi

cat >"$state/env" <<EOF
KUBECONFIG=$state/admin.kubeconfig
KUBECTL=$bin/kubectl
HOST_ADDR=$host_addr
NODE_ADDR=$node_addr
POD_CIDR=$pod_cidr
NETNS=$netns
CONTAINERD=$sock
EOF
echo "kube: cluster ready (node airlock-node at $node_addr, pods on $pod_cidr); $state/env"
