package badgervault

import (
	"sync"
	"sync/atomic"
)

// tenantUsage is the per-tenant share of the stored artifact bytes, for the
// quota. It is owned by the Store and changes wherever the global byte count
// does for an artifact (reserve, give back, eviction, dropped records).
type tenantUsage struct {
	mu sync.Mutex
	m  map[string]*tenantState
}

type tenantState struct {
	bytes int64 // guarded by tenantUsage.mu
	// nextEvict is as Store.nextEvict, for this tenant's own eviction.
	nextEvict atomic.Int64
}

func (u *tenantUsage) reset(per map[string]int64) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.m = make(map[string]*tenantState, len(per))
	for t, n := range per {
		u.m[t] = &tenantState{bytes: n}
	}
}

func (u *tenantUsage) state(tenant string) *tenantState {
	if u.m == nil {
		u.m = map[string]*tenantState{}
	}
	st := u.m[tenant]
	if st == nil {
		st = &tenantState{}
		u.m[tenant] = st
	}
	return st
}

// add changes tenant's bytes by n; a tenant back at zero is forgotten, so
// the map holds only tenants with something stored or in flight.
func (u *tenantUsage) add(tenant string, n int64) {
	if n == 0 {
		return
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	st := u.state(tenant)
	if st.bytes += n; st.bytes <= 0 {
		delete(u.m, tenant)
	}
}

// tryReserve adds n to tenant's bytes if the result stays within limit.
func (u *tenantUsage) tryReserve(tenant string, n, limit int64) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	st := u.state(tenant)
	if st.bytes+n > limit {
		if st.bytes == 0 {
			delete(u.m, tenant)
		}
		return false
	}
	st.bytes += n
	return true
}

func (u *tenantUsage) used(tenant string) int64 {
	u.mu.Lock()
	defer u.mu.Unlock()
	if st := u.m[tenant]; st != nil {
		return st.bytes
	}
	return 0
}

// next returns tenant's eviction hint, created if needed.
func (u *tenantUsage) next(tenant string) *atomic.Int64 {
	u.mu.Lock()
	defer u.mu.Unlock()
	return &u.state(tenant).nextEvict
}
