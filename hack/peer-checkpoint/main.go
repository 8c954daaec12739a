// Command upstream-checkpoint-reader loads a kubelet plugin checkpoint with the upstream
// NVIDIA ComputeDomain plugin's own checkpoint code (placed beside this file at build time
// by build.sh, never kept in this repository) and prints what that plugin would see:
// {"nodeBootID": "...", "claims": {"<uid>": {"state": "...", "devices": ["<pool>/<device>", ...]}}}.
// A checkpoint the upstream plugin cannot read makes it exit 1 with the reason.
package main

import (
	"encoding/json"
	"fmt"
	"os"
)

type claimView struct {
	State     string   `json:"state"`
	Name      string   `json:"name"`
	Namespace string   `json:"namespace"`
	Devices   []string `json:"devices"`
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: upstream-checkpoint-reader <checkpoint.json>")
		os.Exit(2)
	}
	data, err := os.ReadFile(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	var cp Checkpoint
	if err := cp.UnmarshalCheckpoint(data); err != nil {
		fmt.Fprintf(os.Stderr, "unmarshal: %v\n", err)
		os.Exit(1)
	}
	if err := cp.VerifyChecksum(); err != nil {
		fmt.Fprintf(os.Stderr, "checksum: %v\n", err)
		os.Exit(1)
	}
	latest := cp.ToLatestVersion()
	claims := map[string]claimView{}
	for uid, claim := range latest.V2.PreparedClaims {
		view := claimView{State: string(claim.CheckpointState), Name: claim.Name, Namespace: claim.Namespace,
			Devices: []string{}}
		for _, device := range claim.PreparedDevices.GetDevices() {
			view.Devices = append(view.Devices, device.PoolName+"/"+device.DeviceName)
		}
		claims[uid] = view
	}
	out, _ := json.Marshal(map[string]any{"nodeBootID": latest.GetNodeBootID(), "claims": claims})
	fmt.Println(string(out))
}
