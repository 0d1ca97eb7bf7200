package remote

// Incarnation is the host and boot a host agent runs in, as its hello
// says, and for a container the engine's id of it and its start time, as
// the engine says, for a pod its uid and start time, as kubectl says:
// what a command started through the agent cannot outlive. A container
// removed and made again under its name, or restarted, or a pod made
// again under its name (rescheduled), is another incarnation although its
// host kept its boot.
type Incarnation struct {
	Hostname    string `json:"hostname,omitempty"`
	BootID      string `json:"bootId,omitempty"`      // the kernel's random boot id; "" when unknown
	ContainerID string `json:"containerId,omitempty"` // the engine's id of the container; "" for a host
	PodUID      string `json:"podUid,omitempty"`      // the pod's uid; "" for a host or an engine's container
	StartedAt   string `json:"startedAt,omitempty"`   // the container's or pod's start, as the engine or kubectl writes it
}

// Key is what must be the same when the target is found again for a
// command of it to be there still: the pod's uid and start, the
// container's id and start, else the boot id. "" when unknown.
func (in Incarnation) Key() string {
	if in.PodUID != "" {
		return "pod:" + in.PodUID + "@" + in.StartedAt
	}
	if in.ContainerID != "" {
		return "container:" + in.ContainerID + "@" + in.StartedAt
	}
	return in.BootID
}
