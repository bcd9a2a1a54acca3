// libcni-run: drives a CNI network list through libcni, the Go library of the CNI project that
// cnitool, podman's CNI backend and containerd's go-cni are built on, as those callers do: it
// loads the conflist, finds the plugins in CNI_PATH, and runs ADD, CHECK or DEL for one
// container with its CNI_ARGS. Built by the tests (tests/tests/libcni.rs) in GOPATH mode
// against Debian's golang-github-appc-cni-dev, so nothing is fetched from the network.
//
// Usage: CNI_PATH=DIR CNI_CONTAINERID=ID [CNI_ARGS=K=V;K=V] libcni-run add|check|del CONFLIST NETNS
// ADD prints the result as JSON on stdout; any failure goes to stderr with exit code 1.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/containernetworking/cni/libcni"
)

func fail(err error) {
	fmt.Fprintln(os.Stderr, err)
	os.Exit(1)
}

func main() {
	if len(os.Args) != 4 {
		fmt.Fprintln(os.Stderr, "usage: libcni-run add|check|del CONFLIST NETNS")
		os.Exit(2)
	}
	list, err := libcni.ConfListFromFile(os.Args[2])
	if err != nil {
		fail(err)
	}
	rt := &libcni.RuntimeConf{
		ContainerID: os.Getenv("CNI_CONTAINERID"),
		NetNS:       os.Args[3],
		IfName:      "eth0",
	}
	for _, kv := range strings.Split(os.Getenv("CNI_ARGS"), ";") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			rt.Args = append(rt.Args, [2]string{k, v})
		}
	}
	cni := libcni.NewCNIConfig(strings.Split(os.Getenv("CNI_PATH"), ":"), nil)
	ctx := context.Background()
	switch os.Args[1] {
	case "add":
		result, err := cni.AddNetworkList(ctx, list, rt)
		if err != nil {
			fail(err)
		}
		out, err := json.Marshal(result)
		if err != nil {
			fail(err)
		}
		fmt.Println(string(out))
	case "check":
		err = cni.CheckNetworkList(ctx, list, rt)
	case "del":
		err = cni.DelNetworkList(ctx, list, rt)
	default:
		err = fmt.Errorf("unknown command %q (add, check or del)", os.Args[1])
	}
	if err != nil {
		fail(err)
	}
}
