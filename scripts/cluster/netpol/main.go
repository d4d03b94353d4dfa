// The NetworkPolicy agent of `scripts/cluster.sh up --netpol`: the controller of
// sigs.k8s.io/kube-network-policies v0.8.0, unmodified, used as a library (its verdict engine:
// every new connection to or from a pod is queued to it over NFQUEUE and accepted or dropped by
// the NetworkPolicies of both ends). This main differs from the module's own in three ways:
//   - a kubeconfig (the module's main knows only the in-cluster configuration of a pod);
//   - SIGTERM stops it (the module's main waits for SIGINT only);
//   - its nftables rules cannot be installed on a kernel without CONFIG_NFT_QUEUE (the `queue`
//     statement: "Could not process rule: No such file or directory"); the controller logs that
//     and goes on. scripts/cluster.sh sends the packets to the same queue with iptables
//     (`-j NFQUEUE`, through nft_compat), which the verdict loop does not tell apart.
//
// NRI stays on as in the module's main (no runtime socket here: it logs and uses the API
// server's pod IPs). Config.NRIdisabled is not usable in v0.8.0: a packet from an address no
// pod has then dereferences the missing NRI plugin.
package main

import (
	"context"
	"flag"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	"sigs.k8s.io/kube-network-policies/pkg/networkpolicy"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "the agent's kubeconfig")
	nodeName := flag.String("node-name", "", "the node the agent runs on")
	queueID := flag.Int("nfqueue-id", 100, "the NFQUEUE the iptables rules send packets to")
	klog.InitFlags(nil)
	flag.Parse()

	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()

	config, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		klog.Fatalf("kubeconfig %s: %v", *kubeconfig, err)
	}
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		klog.Fatalf("client: %v", err)
	}
	factory := informers.NewSharedInformerFactory(client, 0)
	controller, err := networkpolicy.NewController(
		client,
		factory.Networking().V1().NetworkPolicies(),
		factory.Core().V1().Namespaces(),
		factory.Core().V1().Pods(),
		nil, nil, nil, nil, // no (Baseline)AdminNetworkPolicy
		networkpolicy.Config{
			QueueID:             *queueID,
			NodeName:            *nodeName,
			NetfilterBug1766Fix: true,
		},
	)
	if err != nil {
		klog.Fatalf("controller: %v", err)
	}
	factory.Start(ctx.Done())
	if err := controller.Run(ctx); err != nil {
		klog.Fatalf("controller: %v", err)
	}
}
