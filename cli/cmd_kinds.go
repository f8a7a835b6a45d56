package cli

import (
	"encoding/json"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func (r *root) kindsCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "kinds",
		Short: "Print the kinds the cluster serves, for lint --kinds in CI",
		Long: `Prints the cluster's discovery (every group version and its resources) as JSON. Commit it to
the repository and run "kubectl teardown lint --kinds kinds.json" in CI, where there is no cluster:
target, lookup and job kinds are then checked as the operator checks them. The output of
"kubectl api-resources" is accepted too.`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			dc, err := r.flags.ToDiscoveryClient()
			if err != nil {
				return usageError("discovery: %v", err)
			}
			_, lists, err := dc.ServerGroupsAndResources()
			if err != nil && len(lists) == 0 {
				return apiError(err)
			}
			out := make([]*metav1.APIResourceList, 0, len(lists))
			for _, l := range lists {
				trimmed := &metav1.APIResourceList{GroupVersion: l.GroupVersion}
				for _, res := range l.APIResources {
					trimmed.APIResources = append(trimmed.APIResources, metav1.APIResource{Name: res.Name, Kind: res.Kind, Namespaced: res.Namespaced, Verbs: res.Verbs})
				}
				out = append(out, trimmed)
			}
			enc := json.NewEncoder(r.streams.Out)
			enc.SetIndent("", "  ")
			return enc.Encode(out)
		},
	}
}
