"""The local control plane: etcd, kube-apiserver, scheduler and controller-manager, with its PKI."""
