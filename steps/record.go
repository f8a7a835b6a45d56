package steps

import (
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ObjectRecord is what a step that acts on one object per attempt (a job step's Job, a resource
// step's object) keeps in its state between passes: the attempt it belongs to, the object, and
// the UID of the object it made or acted on, once known (no other object is trusted).
type ObjectRecord struct {
	Attempt   int32
	Namespace string
	Name      string
	UID       types.UID
}

// RecordKeys names an ObjectRecord's keys in a step's state. They are stored in runs, so a
// kind's keys never change.
type RecordKeys struct {
	Object string // namespace/name
	UID    string
}

// stateAttempt is the key of the attempt a record belongs to.
const stateAttempt = "attempt"

// ReadRecord reads a record from a step's state; missing keys read as zero.
func ReadRecord(m map[string]string, keys RecordKeys) ObjectRecord {
	var r ObjectRecord
	a, _ := strconv.Atoi(m[stateAttempt])
	r.Attempt = int32(a)
	r.Namespace, r.Name, _ = strings.Cut(m[keys.Object], "/")
	r.UID = types.UID(m[keys.UID])
	return r
}

// Encode writes the record as a step's state.
func (r ObjectRecord) Encode(keys RecordKeys) map[string]string {
	m := map[string]string{stateAttempt: strconv.Itoa(int(r.Attempt))}
	if r.Name != "" {
		m[keys.Object] = r.Namespace + "/" + r.Name
	}
	if r.UID != "" {
		m[keys.UID] = string(r.UID)
	}
	return m
}

// Ref is the object's namespace/name, as messages show it.
func (r ObjectRecord) Ref() string { return r.Namespace + "/" + r.Name }

// Key is the object's key for a client.
func (r ObjectRecord) Key() client.ObjectKey {
	return client.ObjectKey{Namespace: r.Namespace, Name: r.Name}
}
