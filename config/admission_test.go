package config

import (
	"runtime"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/store/valkey"
)

// TestMaxStoreWaiting: server.max_store_waiting, unset, follows the store
// section (DefaultMaxStoreWaiting: 16 per Postgres connection, whatever
// sets the pool's size, at least 64; valkey-go's pipeline capacity; 64 for
// bolt; no limit for memory); it is set from the file (an empty value is unset, as
// config.example.yaml writes it), the environment or an override, 0 is no
// limit, and a negative value is refused at its path.
func TestMaxStoreWaiting(t *testing.T) {
	pg := "store: {driver: postgres, postgres: {dsn: 'postgres://u@127.0.0.1:5432/db'}}\n"
	cases := []struct {
		name string
		yaml string
		env  []string
		want int
	}{
		{"memory", base, nil, 0},
		{"bolt", base + "store: {driver: bolt}\n", nil, 64},
		{"valkey", base + "store: {driver: valkey, valkey: {addrs: ['127.0.0.1:6379']}}\n", nil, valkey.PipelineCapacity(valkey.DefaultConnections)},
		{"postgres default pool", base + pg, nil, max(64, 16*max(4, runtime.NumCPU()))},
		{"postgres max_conns", base + "store: {driver: postgres, postgres: {dsn: 'postgres://u@127.0.0.1/db', max_conns: 16}}\n", nil, 16 * 16},
		{"postgres pool_max_conns in the DSN", base + "store: {driver: postgres, postgres: {dsn: 'postgres://u@127.0.0.1/db?pool_max_conns=5'}}\n", nil, 16 * 5},
		{"postgres max_conns from the environment", base + pg, []string{"IDEMGATE_STORE_POSTGRES_MAX_CONNS=6"}, 16 * 6},
		{"postgres small pool: the floor", base + "store: {driver: postgres, postgres: {dsn: 'postgres://u@127.0.0.1/db', max_conns: 2}}\n", nil, 64},
		{"set", base + pg + "server: {max_store_waiting: 10}\n", nil, 10},
		{"empty value is unset", base + pg + "server:\n  max_store_waiting:\n", nil, max(64, 16*max(4, runtime.NumCPU()))},
		{"0 is no limit", base + pg + "server: {max_store_waiting: 0}\n", nil, 0},
		{"environment", base + pg, []string{"IDEMGATE_SERVER_MAX_STORE_WAITING=7"}, 7},
	}
	for _, c := range cases {
		if got := mustParse(t, c.yaml, c.env...).Server.MaxStoreWaiting; got != c.want {
			t.Errorf("%s: max_store_waiting = %d, want %d", c.name, got, c.want)
		}
	}
	if got := valkey.PipelineCapacity(valkey.DefaultConnections); got < 1024 {
		t.Errorf("valkey.PipelineCapacity(%d) = %d, want at least one ring of 1024", valkey.DefaultConnections, got)
	}
	c, err := Load("", nil, WithOverrides(map[string]string{"store.driver": "bolt", "upstream.url": "http://127.0.0.1:3000"}))
	if err != nil || c.Server.MaxStoreWaiting != 64 {
		t.Errorf("--store bolt: max_store_waiting %v, %v; want 64 (the override's driver decides)", c, err)
	}
	_, err = Load(writeFile(t, base+"server: {max_store_waiting: -1}\n"), nil)
	if err == nil || !strings.Contains(err.Error(), "server.max_store_waiting") {
		t.Errorf("max_store_waiting -1: %v, want an error at server.max_store_waiting", err)
	}
}
