// Package admission builds the MutatingAdmissionPolicy, and its binding, that arm a teardown
// policy's targets when they are created: the API server adds the policy's finalizer to each
// object its kind, selectors and match select, whether or not the operator runs. It also says
// whether a policy's CEL match can run at admission (CheckMatch), for the engine, lint and plan
// alike. Everything here is pure: the engine writes what Build returns.
package admission
