package kubeadapter_test

import (
	"context"
	"fmt"
	"log"
	"path/filepath"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/homedir"

	"github.com/kubewire/kubewire/kubeadapter"
)

// One call between loading the config and building clients.
func ExampleApply() {
	kubeconfig := filepath.Join(homedir.HomeDir(), ".kube", "config")

	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		log.Fatal(err)
	}
	if err := kubeadapter.Apply(cfg, kubeadapter.WithTimeout(30*time.Second)); err != nil {
		log.Fatal(err)
	}
	clientset, err := kubernetes.NewForConfig(cfg) // every client built from cfg is covered
	if err != nil {
		log.Fatal(err)
	}

	nss, err := clientset.CoreV1().Namespaces().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(len(nss.Items), "namespaces")
}
