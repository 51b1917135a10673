package admin

import (
	"fmt"
	"net/http"

	"github.com/idemgate/idemgate/policy"
	"github.com/idemgate/idemgate/policy/identity"
	"github.com/idemgate/idemgate/problem"
	"github.com/idemgate/idemgate/store"
)

// recordNotFound answers a lookup or purge that found no record. When the owner
// given is not of the stored form of the route's owner source, it says which
// form is (owner=carol on a header:X-User route used to be answered 404
// with no hint that the stored form is h:carol; TestAdminLookupsAndCLI).
func (h *handler) recordNotFound(w http.ResponseWriter, r *http.Request, id store.Identity) {
	routeName := r.URL.Query().Get("route")
	detail := fmt.Sprintf("no idempotency record for that owner and key in scope %q (route %q)", id.Scope, routeName)
	if p := h.opts.Policy(); p != nil {
		for _, rt := range p.Routes() {
			if rt.Name != routeName || rt.HasStoredOwnerForm(id.Owner) || id.Owner == policy.OwnerRecordOwner {
				continue
			}
			hint := ""
			if rt.Owner.Kind == identity.OwnerHeader {
				hint = fmt.Sprintf(" (here owner=%s)", identity.HeaderOwner(id.Owner))
			}
			detail += fmt.Sprintf("; the owner given is not of the form route %q stores: it takes its owner from %s and stores %s, so give owner in that form%s, or owner_value with the raw value",
				rt.Name, rt.Owner, rt.StoredOwnerForm(), hint)
		}
	}
	problem.Write(w, problem.AdminRecordNotFound.With(detail))
}
