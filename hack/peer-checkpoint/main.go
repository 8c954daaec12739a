// Command upstream-checkpoint-reader uses the upstream NVIDIA ComputeDomain plugin's own
// checkpoint code (placed beside this file at build time by build.sh, never kept in this
// repository) to check and to produce kubelet plugin checkpoints exactly as that plugin does.
//
//	upstream-checkpoint-reader <checkpoint.json>
//	    prints what the upstream plugin sees in the file:
//	    {"nodeBootID": "...", "claims": {"<uid>": {"state", "name", "namespace", "devices": ["<pool>/<device>"]}}}
//	    and exits 1 with the reason when that plugin could not load it (decoding, checksums).
//	upstream-checkpoint-reader write < claims.json > checkpoint.json
//	    writes the checkpoint the upstream plugin would write for the claims on stdin:
//	    {"nodeBootID": "...", "claims": {"<uid>": {"state", "name", "namespace", "domainID",
//	     "devices": [{"type": "channel"|"daemon", "id", "pool", "device", "requests", "cdiDeviceIDs"}]}}}
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
)

type claimView struct {
	State     string   `json:"state"`
	Name      string   `json:"name"`
	Namespace string   `json:"namespace"`
	Devices   []string `json:"devices"`
}

type deviceInput struct {
	Type         string   `json:"type"`
	ID           int      `json:"id"`
	Pool         string   `json:"pool"`
	Device       string   `json:"device"`
	Requests     []string `json:"requests"`
	CDIDeviceIDs []string `json:"cdiDeviceIDs"`
}

type claimInput struct {
	State     string        `json:"state"`
	Name      string        `json:"name"`
	Namespace string        `json:"namespace"`
	DomainID  string        `json:"domainID"`
	Devices   []deviceInput `json:"devices"`
}

type checkpointInput struct {
	NodeBootID string                `json:"nodeBootID"`
	Claims     map[string]claimInput `json:"claims"`
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
	os.Exit(1)
}

func read(path string) {
	data, err := os.ReadFile(path)
	if err != nil {
		fail("%v", err)
	}
	var cp Checkpoint
	if err := cp.UnmarshalCheckpoint(data); err != nil {
		fail("unmarshal: %v", err)
	}
	if err := cp.VerifyChecksum(); err != nil {
		fail("checksum: %v", err)
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

func write(in io.Reader) {
	var input checkpointInput
	if err := json.NewDecoder(in).Decode(&input); err != nil {
		fail("reading claims from stdin: %v", err)
	}
	claims := PreparedClaimsByUID{}
	for uid, c := range input.Claims {
		group := &PreparedDeviceGroup{ConfigState: DeviceConfigState{Type: ComputeDomainChannelType, ComputeDomain: c.DomainID}}
		for _, d := range c.Devices {
			device := &CheckpointedDevice{Requests: d.Requests, PoolName: d.Pool, DeviceName: d.Device,
				CDIDeviceIDs: d.CDIDeviceIDs}
			if d.Type == ComputeDomainDaemonType {
				group.ConfigState.Type = ComputeDomainDaemonType
				group.Devices = append(group.Devices, PreparedDevice{Daemon: &PreparedComputeDomainDaemon{
					Info: &ComputeDomainDaemonInfo{ID: d.ID}, Device: device}})
			} else {
				group.Devices = append(group.Devices, PreparedDevice{Channel: &PreparedComputeDomainChannel{
					Info: &ComputeDomainChannelInfo{ID: d.ID}, Device: device}})
			}
		}
		claim := PreparedClaim{CheckpointState: ClaimCheckpointState(c.State), Name: c.Name, Namespace: c.Namespace}
		if len(group.Devices) > 0 {
			claim.PreparedDevices = PreparedDevices{group}
		}
		claims[uid] = claim
	}
	cp := &Checkpoint{V2: &CheckpointV2{PreparedClaims: claims, NodeBootID: input.NodeBootID}}
	data, err := cp.MarshalCheckpoint()
	if err != nil {
		fail("marshal: %v", err)
	}
	os.Stdout.Write(data)
}

func main() {
	switch {
	case len(os.Args) == 2 && os.Args[1] == "write":
		write(os.Stdin)
	case len(os.Args) == 2:
		read(os.Args[1])
	default:
		fmt.Fprintln(os.Stderr, "usage: upstream-checkpoint-reader <checkpoint.json> | upstream-checkpoint-reader write < claims.json")
		os.Exit(2)
	}
}
