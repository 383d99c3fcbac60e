// Command kvxds is an xDS control plane that makes Envoy and proxyless
// gRPC clients route LLM inference requests for KV-cache locality.
//
//	kvxds serve [--policy FILE] [--xds HOST:PORT] [--admin HOST:PORT]
//	kvxds validate [--strict] [--probe] FILE...
//	kvxds render [--grpc | --grpc-js] FILE
//	kvxds bootstrap --node ID [--xds HOST:PORT] [--grpc] [--delta] [--tls-ca FILE [--tls-cert FILE --tls-key FILE] [--tls-server-name NAME]]
//	kvxds recipe istio|envoy-gateway|envoy POOL --policy FILE [--xds-address HOST:PORT] [--namespace NS] [--gateway NAME]
//	kvxds status [--admin [https://]HOST:PORT] [--token-file FILE] [--tls-ca FILE] [--watch] [--json]
//	kvxds version
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"

	"github.com/hashicorp/go-hclog"

	"github.com/kvxds/kvxds/controller"
	"github.com/kvxds/kvxds/examples"
	"github.com/kvxds/kvxds/policy"
	"github.com/kvxds/kvxds/reconcile"
	"github.com/kvxds/kvxds/xds/bootstrap"
	"github.com/kvxds/kvxds/xds/translate"
)

// version is set at link time (-ldflags "-X main.version=...").
var version = ""

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

const usage = `kvxds routes LLM requests for KV-cache locality by configuring Envoy and
proxyless gRPC clients over xDS.

Usage:
  kvxds serve [--policy FILE] [--xds HOST:PORT] [--admin HOST:PORT] [--log-format text|json] [--log-level LEVEL]
  kvxds validate [--strict] [--probe] FILE...
  kvxds render [--grpc | --grpc-js] FILE
  kvxds bootstrap --node ID [--xds HOST:PORT] [--grpc] [--delta] [--cluster NAME] [--envoy-admin HOST:PORT]
                  [--tls-ca FILE [--tls-cert FILE --tls-key FILE] [--tls-server-name NAME]]
  kvxds recipe istio|envoy-gateway|envoy POOL --policy FILE [--xds-address HOST:PORT] [--namespace NS] [--gateway NAME]
  kvxds status [--admin [https://]HOST:PORT] [--token-file FILE] [--tls-ca FILE [--tls-cert FILE --tls-key FILE]] [--watch] [--json]
  kvxds version

Without --policy, serve runs the embedded example policy (examples/chat.hcl).
`

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "serve":
		return serve(args[1:], stderr)
	case "validate":
		return validate(args[1:], stdout, stderr)
	case "bootstrap":
		return bootstrapCmd(args[1:], stdout, stderr)
	case "render":
		return render(args[1:], stdout, stderr)
	case "recipe":
		return recipeCmd(args[1:], stdout, stderr)
	case "status":
		return statusCmd(args[1:], stdout, stderr)
	case "version", "--version", "-version":
		fmt.Fprintln(stdout, "kvxds", buildVersion())
		return 0
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "kvxds: unknown command %q\n\n%s", args[0], usage)
	return 2
}

func buildVersion() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}

func serve(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	policyFile := fs.String("policy", "", "policy file (HCL), hot-reloaded; default: the embedded example policy")
	xdsAddr := fs.String("xds", "", "xDS listen address, overrides the policy's xds block")
	adminAddr := fs.String("admin", "", "admin listen address (/metrics, /healthz, /readyz, /api/v1/status), overrides the policy's admin block")
	logFormat := fs.String("log-format", "text", "log format: text or json")
	logLevel := fs.String("log-level", "info", "log level: trace, debug, info, warn, error")
	id := fs.String("id", "", "this instance's identity among kvxds instances (ha block); default $POD_NAME, else the hostname")
	advertise := fs.String("advertise-admin", "", "the admin address other kvxds instances reach this one at (http://host:port), where they report their Envoys' requests in flight while it leads; default http://$POD_IP:<admin port> when $POD_IP is set")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "kvxds serve: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if *logFormat != "text" && *logFormat != "json" {
		fmt.Fprintf(stderr, "kvxds serve: --log-format must be text or json, not %q\n", *logFormat)
		return 2
	}
	level := hclog.LevelFromString(*logLevel)
	if level == hclog.NoLevel {
		fmt.Fprintf(stderr, "kvxds serve: unknown --log-level %q\n", *logLevel)
		return 2
	}
	logger := hclog.New(&hclog.LoggerOptions{
		Name:       "kvxds",
		Level:      level,
		Output:     stderr,
		JSONFormat: *logFormat == "json",
	})
	routeKlog(logger.Named("k8s"))
	opts := controller.Options{
		PolicyFile:   *policyFile,
		XDSAddress:   *xdsAddr,
		AdminAddress: *adminAddr,
		Logger:       logger,
		Version:      buildVersion(),
		ID:           *id,
		Advertise:    *advertise,
	}
	if *policyFile == "" {
		opts.PolicySource = examples.Chat
		opts.PolicyName = "examples/chat.hcl (embedded)"
		logger.Info("no --policy given: serving the embedded example policy (examples/chat.hcl)")
	}
	c, err := controller.New(opts)
	if err != nil {
		fmt.Fprintf(stderr, "kvxds serve: %v\n", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := c.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
		logger.Error("stopped", "error", err)
		return 1
	}
	logger.Info("stopped")
	return 0
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// render prints the resources a policy's static fleet translates to.
func render(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("render", flag.ContinueOnError)
	fs.SetOutput(stderr)
	grpcOut := fs.Bool("grpc", false, "render what proxyless gRPC clients (grpc-go, grpc-java, C-core) receive instead of Envoy")
	jsOut := fs.Bool("grpc-js", false, "render what grpc-js clients receive instead of Envoy")
	noHashOut := fs.Bool("grpc-nohash", false, "render what gRPC clients whose version crashes on a ring hash receive instead of Envoy")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if n := btoi(*grpcOut) + btoi(*jsOut) + btoi(*noHashOut); fs.NArg() != 1 || n > 1 {
		fmt.Fprintln(stderr, "usage: kvxds render [--grpc | --grpc-js | --grpc-nohash] FILE")
		return 2
	}
	p, diags := policy.Load(fs.Arg(0))
	if diags.HasErrors() {
		fmt.Fprint(stderr, policy.Format(diags))
		return 1
	}
	kind := translate.Envoy
	switch {
	case *grpcOut:
		kind = translate.GRPC
	case *jsOut:
		kind = translate.GRPCJS
	case *noHashOut:
		kind = translate.GRPCNoHash
	}
	out, err := reconcile.Render(p, kind)
	if err != nil {
		fmt.Fprintf(stderr, "kvxds render: %v\n", err)
		return 1
	}
	stdout.Write(out)
	return 0
}

func bootstrapCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bootstrap", flag.ContinueOnError)
	fs.SetOutput(stderr)
	node := fs.String("node", "", "node id (required; any id is served)")
	xdsAddr := fs.String("xds", "127.0.0.1:18000", "kvxds xDS address as the data plane reaches it; several instances comma-separated, in order of preference")
	grpcOut := fs.Bool("grpc", false, "print a gRPC xDS bootstrap (JSON) instead of an Envoy bootstrap (YAML)")
	delta := fs.Bool("delta", false, "Envoy: use incremental (delta) xDS")
	cluster := fs.String("cluster", "", "node cluster (Envoy service cluster)")
	envoyAdmin := fs.String("envoy-admin", "127.0.0.1:9901", "Envoy admin address")
	tlsCA := fs.String("tls-ca", "", "reach kvxds over TLS: the CA file (PEM) that signed kvxds's certificate (the policy's xds tls block)")
	tlsCert := fs.String("tls-cert", "", "with --tls-ca: the data plane's certificate file (PEM), for kvxds's client_ca_file")
	tlsKey := fs.String("tls-key", "", "with --tls-cert: the data plane's private key file (PEM)")
	tlsServerName := fs.String("tls-server-name", "", "with --tls-ca, Envoy only: the name kvxds's certificate holds (SNI and the name checked); default: the --xds hosts")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *node == "" {
		fmt.Fprintln(stderr, "kvxds bootstrap: --node is required")
		return 2
	}
	o := bootstrap.Options{NodeID: *node, NodeCluster: *cluster, XDSAddress: *xdsAddr, Delta: *delta, AdminAddress: *envoyAdmin}
	if addrs := strings.Split(*xdsAddr, ","); len(addrs) > 1 {
		o.XDSAddresses = addrs
	}
	switch {
	case *tlsCA != "":
		o.TLS = &bootstrap.TLS{CAFile: *tlsCA, CertFile: *tlsCert, KeyFile: *tlsKey, ServerName: *tlsServerName}
	case *tlsCert != "" || *tlsKey != "" || *tlsServerName != "":
		fmt.Fprintln(stderr, "kvxds bootstrap: --tls-cert, --tls-key and --tls-server-name need --tls-ca")
		return 2
	}
	var out []byte
	var err error
	if *grpcOut {
		out, err = bootstrap.GRPCJSON(o)
		out = append(out, '\n')
	} else {
		out, err = bootstrap.EnvoyYAML(o)
	}
	if err != nil {
		fmt.Fprintf(stderr, "kvxds bootstrap: %v\n", err)
		return 2
	}
	stdout.Write(out)
	return 0
}
