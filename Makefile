GO ?= go
BIN := bin/kvxds
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo devel)

.PHONY: run build test vet fmt e2e-deps kube-deps bench microbench clusterbench adsbench demo golden clean

# kvxds alone on the example policy.
run:
	$(GO) run ./cmd/kvxds serve --policy examples/chat.hcl

build:
	$(GO) build -ldflags "-X main.version=$(VERSION)" -o $(BIN) ./cmd/kvxds

vet:
	$(GO) vet ./...

fmt:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

# grpc-js for the end-to-end tests, from the registry, reinstalled when
# the lock file changes.
GRPCJS := test/e2e/grpcjs

e2e-deps: $(GRPCJS)/node_modules

$(GRPCJS)/node_modules: $(GRPCJS)/package-lock.json
	cd $(GRPCJS) && npm ci --no-audit --no-fund
	@touch $@

# A real kube-apiserver and etcd for the Kubernetes discovery tests, built
# from Go modules into a cache directory once (several minutes the first
# time; KVXDS_KUBE_BIN overrides the directory).
kube-deps:
	@GO=$(GO) test/kube/build.sh >/dev/null

# The README's second command.
test: fmt vet e2e-deps kube-deps
	$(GO) test -race -timeout 20m ./...

# Translation, snapshot, push, scraping and publishing micro-benchmarks.
microbench:
	$(GO) test -run '^$$' -bench . -benchmem ./xds/... ./reconcile/ ./weights/ ./ha/...

# Against a real kube-apiserver (root, iproute2 and kube-deps): an
# EndpointSlice change to a grpc-go client, kvxds's footprint at 1,000
# endpoints, and HA failover after SIGKILL.
clusterbench: kube-deps
	$(GO) test -run '^$$' -bench 'EndpointSliceToClient|KubernetesFootprint' -benchtime 1x -timeout 30m ./test/e2e/
	$(GO) test -run '^$$' -bench 'HAFailover' -benchtime 10x -timeout 30m ./test/e2e/

# Push latency to Envoy-like ADS streams (state of the world and delta):
# kvxds's binary on a 100-replica pool of simulated engines, changed by a
# policy rewrite and by one engine's queue, next to a bare go-control-plane
# server; detection, fan-out p50/p99/last, missed updates and memory per
# stream, and a CPU and heap profile of kvxds at 5,000 streams. Stream
# counts the file descriptor limit cannot hold are skipped. Table and
# profiles in bench-out/adsload/.
ADSBENCH_STREAMS ?= 1000,5000,10000

adsbench: build
	$(GO) build -o bin/kvxds-adsload ./cmd/kvxds-adsload
	./bin/kvxds-adsload bench --kvxds $(BIN) --streams $(ADSBENCH_STREAMS) --delta both --repeats 10 --profile-streams 5000 --out bench-out/adsload

# A soak of kvxds's binary (not part of test): SOAK_STREAMS ADS streams
# (1% of them rejecting every EDS response) for SOAK_DURATION, with a
# metric-driven weight change every second and a policy edit every 30 s;
# kvxds's RSS, heap and goroutines every minute, missed updates, push
# latency per minute and rejection handling. Report in bench-out/soak/.
SOAK_DURATION ?= 10m
SOAK_STREAMS ?= 1000

.PHONY: soak
soak: build
	$(GO) build -o bin/kvxds-adsload ./cmd/kvxds-adsload
	./bin/kvxds-adsload soak --kvxds $(BIN) --streams $(SOAK_STREAMS) --duration $(SOAK_DURATION) --out bench-out/soak

# Chat on 8 simulated replicas: round robin, then kvxds, and the offline
# upper bound; prints the comparison table and where the charts are.
# While it runs, each mode's kvxds shows its status page on DEMO_ADMIN.
DEMO_ADMIN ?= 127.0.0.1:19100
demo:
	$(GO) build -o bin/kvxds-bench ./cmd/kvxds-bench
	./bin/kvxds-bench --workload chat --modes round_robin,kvxds,upper-bound --replicas 8 --admin $(DEMO_ADMIN) --out bench-out/demo

# The micro-benchmarks, the cluster and ADS push benchmarks, then every
# workload under every routing mode (8 replicas, 70% load; results in
# bench-out/), and the rolling restart under round robin and kvxds where it
# can run (root, iproute2, kube-deps). Then chat, Zipf tenants and the
# committed Mooncake trace on both data planes, grpc-go and Envoy (its
# routing from what kvxds serves over ADS; needs luajit), with Envoy's
# bounded load at 150 and 125 (bench-out/dataplanes/), and LoRA adapters
# (multi-lora: kvxds placing adapters against llm-d's lora-affinity
# scorer, on both data planes; bench-out/lora/, and over five minutes
# once placements settle, bench-out/lora/steady/). Then the clients
# that send no session id: the body keys (prompt_prefix, conversation)
# beside the session header and the approximate-index routers (after
# SGLang's cache_aware and llm-d's default profile), on the
# stateless workloads and both Mooncake samples (bench-out/nosession/).
# Then prefill/decode: chat, agent loops, retrieval and the Mooncake trace
# on 4 prefill and 4 decode replicas behind Envoy (bench-out/pd/).
# Every kvxds mode carries the metrics, escape and weights blocks at their
# documented defaults; --bare runs them as pure consistent hashing.
MOONCAKE := test/bench/testdata/mooncake_conversation_trace.jsonl.gz
MOONCAKE_SAMPLE := test/bench/testdata/mooncake_conversation_trace.sample.jsonl
NOSESSION_MODES := round_robin,least_request,kvxds,kvxds+prefix,kvxds+conversation,index,index-llmd,upper-bound
PD_MODES := round_robin,least_request,kvxds,kvxds+hashed-decode,index,upper-bound
bench: microbench clusterbench adsbench
	$(GO) build -o bin/kvxds-bench ./cmd/kvxds-bench
	./bin/kvxds-bench --workload all --modes all --replicas 8 --load 0.7 --out bench-out
	./bin/kvxds-bench --workload chat,zipf-tenants,system-prompt --modes round_robin,kvxds,kvxds+bounded,upper-bound --data-plane grpc-go,envoy --replicas 8 --load 0.7 --out bench-out/dataplanes
	./bin/kvxds-bench --workload zipf-tenants,system-prompt --modes kvxds --no-hot-keys --data-plane grpc-go,envoy --replicas 8 --load 0.7 --out bench-out/dataplanes/no-hot-keys
	for n in 1 8; do \
	  ./bin/kvxds-bench --workload chat,zipf-tenants,system-prompt --modes round_robin,least_request,kvxds,index,index-llmd,upper-bound --data-plane envoy --clients $$n --replicas 8 --load 0.7 --out bench-out/hotkeys/sessions-envoy-$$n && \
	  ./bin/kvxds-bench --workload agent-stateless,retrieval --modes round_robin,least_request,kvxds+conversation,index,index-llmd,upper-bound --data-plane envoy --clients $$n --replicas 8 --load 0.7 --out bench-out/hotkeys/stateless-envoy-$$n || exit 1; \
	done
	./bin/kvxds-bench --workload retrieval --modes kvxds+prefix --prompt-prefix 2048 --data-plane envoy --clients 8 --replicas 8 --load 0.7 --out bench-out/hotkeys/retrieval-prefix-2048
	./bin/kvxds-bench --workload zipf-tenants --modes kvxds+bounded --balance-factor 125 --data-plane envoy --replicas 8 --load 0.7 --out bench-out/dataplanes/bounded-125
	./bin/kvxds-bench --workload multi-lora --modes round_robin,kvxds,kvxds+adapters,index-llmd+lora,upper-bound --data-plane grpc-go,envoy --replicas 8 --load 0.7 --clients 8 --out bench-out/lora
	./bin/kvxds-bench --workload multi-lora --modes kvxds+adapters,index-llmd+lora,upper-bound --data-plane envoy --replicas 8 --load 0.7 --clients 8 --duration 5m --out bench-out/lora/steady
	./bin/kvxds-bench --trace $(MOONCAKE) --modes round_robin,least_request,kvxds,upper-bound --prefix-blocks 1,4,8 --time-scale 5 --data-plane grpc-go,envoy --replicas 8 --load 0.7 --out bench-out/dataplanes/trace
	./bin/kvxds-bench --workload chat,chat-stateless,branching,agent-stateless,retrieval,system-prompt --modes $(NOSESSION_MODES) --replicas 8 --load 0.7 --out bench-out/nosession
	./bin/kvxds-bench --trace $(MOONCAKE_SAMPLE) --modes $(NOSESSION_MODES) --prefix-blocks 1,4 --replicas 8 --load 0.7 --out bench-out/nosession/trace-sample
	./bin/kvxds-bench --trace $(MOONCAKE) --modes $(NOSESSION_MODES) --prefix-blocks 4 --time-scale 5 --replicas 8 --load 0.7 --out bench-out/nosession/trace
	./bin/kvxds-bench --workload chat,agent-stateless --pd 4:4 --modes $(PD_MODES) --load 0.7 --clients 2 --out bench-out/pd
	./bin/kvxds-bench --workload retrieval --pd 4:4 --pd-key prompt_prefix --prompt-prefix 2048 --modes $(PD_MODES) --load 0.7 --clients 2 --out bench-out/pd/retrieval
	./bin/kvxds-bench --trace $(MOONCAKE) --pd 4:4 --prefix-blocks 4 --time-scale 10 --modes $(PD_MODES) --load 0.7 --clients 2 --out bench-out/pd/trace

# Rewrite every golden file from the current code.
# (The Envoy table measurements rewrite theirs with
# go test ./xds/envoylb -update, which takes minutes.)
golden:
	$(GO) test ./policy/ ./reconcile/ ./recipe/ ./cmd/kvxds/ ./xds/translate/ ./xds/bootstrap/ -update

clean:
	rm -rf bin $(GRPCJS)/node_modules
