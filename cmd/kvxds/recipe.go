package main

import (
	"flag"
	"fmt"
	"io"

	"github.com/kvxds/kvxds/policy"
	"github.com/kvxds/kvxds/recipe"
)

const recipeUsage = "usage: kvxds recipe istio|envoy-gateway|envoy POOL --policy FILE [--xds-address HOST:PORT] [--namespace NS] [--gateway NAME]"

// recipeCmd prints what a mesh applies to take one pool's endpoints from
// kvxds (recipe). Flags may follow the target and the pool.
func recipeCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("recipe", flag.ContinueOnError)
	fs.SetOutput(stderr)
	policyFile := fs.String("policy", "", "policy file (HCL) holding the pool and its mesh block")
	xdsAddr := fs.String("xds-address", "", "where the mesh's Envoys reach kvxds (HOST:PORT); default: Service kvxds next to the mesh's service (istio, envoy-gateway), the policy's xds address (envoy)")
	namespace := fs.String("namespace", "", "namespace of the Kubernetes objects; default: the mesh service's (istio) or route's (envoy-gateway)")
	gateway := fs.String("gateway", recipe.DefaultGateway, "envoy-gateway: the Gateway the EnvoyPatchPolicy patches")
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return 2
		}
		if fs.NArg() == 0 {
			break
		}
		pos, args = append(pos, fs.Arg(0)), fs.Args()[1:]
	}
	if len(pos) != 2 || *policyFile == "" {
		fmt.Fprintln(stderr, "kvxds recipe: need a target, a pool and --policy\n"+recipeUsage)
		return 2
	}
	p, diags := policy.Load(*policyFile)
	if diags.HasErrors() {
		fmt.Fprint(stderr, policy.Format(diags))
		return 1
	}
	out, err := recipe.Render(recipe.Target(pos[0]), recipe.Options{
		Policy:     p,
		Pool:       pos[1],
		XDSAddress: *xdsAddr,
		Namespace:  *namespace,
		Gateway:    *gateway,
	})
	if err != nil {
		fmt.Fprintf(stderr, "kvxds %v\n", err)
		return 1
	}
	if _, err := stdout.Write(out); err != nil {
		fmt.Fprintf(stderr, "kvxds recipe: %v\n", err)
		return 1
	}
	return 0
}
