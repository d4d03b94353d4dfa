// SPDX-License-Identifier: GPL-2.0
//
// EdgeCache connection steering over an SO_REUSEPORT listener group.
//
// Built by build.rs: clang -O2 -g -target bpf -I/usr/include/x86_64-linux-gnu -c steer.bpf.c
// Loaded by src/bpf.rs with aya 0.14. The structs below have Rust twins in src/bpf.rs
// (`#[repr(C)]`, same field order); change both together.
//
// Two programs, one per kernel flavour (docs/dataplane-recipes.md section 4):
// - steer_queue, BPF_PROG_TYPE_SOCKET_FILTER attached with SO_ATTACH_REUSEPORT_EBPF: the only
//   flavour that can read skb->queue_mapping. It returns an index into the group's socks[]
//   (bind order, which shifts when a member closes), so it goes through `group_index`
//   (worker -> current index), kept up to date by user space. An index >= group size, or
//   NO_SLOT, makes the kernel fall back to its hash.
// - steer_select, BPF_PROG_TYPE_SK_REUSEPORT: picks a slot of the REUSEPORT_SOCKARRAY `socks`
//   (slot i = worker i). A closed listener's slot empties by itself; selecting it fails and the
//   kernel falls back to its hash over the sockets still open.

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define MAX_WORKERS 1024
#define MAX_CPUS 4096
#define OBSERVED 16384
#define NO_SLOT 0xffffffffu

enum steer_mode {
	MODE_QUEUE = 0,
	MODE_CPU = 1,
	MODE_HASH = 2,
};

/* Rust twin: bpf::Config */
struct steer_cfg {
	__u32 mode;         /* enum steer_mode */
	__u32 n;            /* workers */
	__u32 queue_offset; /* subtracted from queue_mapping: 1 for NIC drivers, 0 for veth/lo */
	__u32 observe;      /* non-zero: record every steered SYN in `seen` (tests, debugging) */
};

/* Rust twin: bpf::Observation. One steered SYN, keyed by the client's port. */
struct steer_obs {
	__u32 queue;  /* skb->queue_mapping (socket filter); NO_SLOT in sk_reuseport */
	__u32 cpu;    /* CPU the SYN was processed on */
	__u32 hash;   /* md->hash (sk_reuseport); 0 in the socket filter */
	__u32 worker; /* worker chosen; NO_SLOT = none (kernel hash) */
	__u32 index;  /* socket filter: group index returned; sk_reuseport: sockarray key */
	__s32 err;    /* bpf_sk_select_reuseport() result; 0 in the socket filter */
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct steer_cfg);
} cfg SEC(".maps");

/* Slot i = worker i's listener. The value must be 4 bytes for aya's ReusePortSockArray. */
struct {
	__uint(type, BPF_MAP_TYPE_REUSEPORT_SOCKARRAY);
	__uint(max_entries, MAX_WORKERS);
	__type(key, __u32);
	__type(value, __u32);
} socks SEC(".maps");

/* CPU -> 1 + the worker pinned to it (0, the initial value: none), for MODE_CPU. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_CPUS);
	__type(key, __u32);
	__type(value, __u32);
} cpu_worker SEC(".maps");

/* Worker -> its listener's index in the group's socks[] (NO_SLOT: closed), for MODE_QUEUE. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_WORKERS);
	__type(key, __u32);
	__type(value, __u32);
} group_index SEC(".maps");

/* [w] = SYNs steered to worker w; [MAX_WORKERS] = SYNs left to the kernel's hash. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, MAX_WORKERS + 1);
	__type(key, __u32);
	__type(value, __u64);
} stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, OBSERVED);
	__type(key, __u32);
	__type(value, struct steer_obs);
} seen SEC(".maps");

static __always_inline void count(__u32 key)
{
	__u64 *v = bpf_map_lookup_elem(&stats, &key);

	if (v)
		*v += 1;
}

static __always_inline void observe(__u32 sport, __u32 queue, __u32 hash, __u32 worker,
				    __u32 index, __s32 err)
{
	struct steer_obs o = {
		.queue = queue,
		.cpu = bpf_get_smp_processor_id(),
		.hash = hash,
		.worker = worker,
		.index = index,
		.err = err,
	};

	bpf_map_update_elem(&seen, &sport, &o, BPF_ANY);
}

/* The client's TCP source port. In a reuseport socket filter skb->data is already past the TCP
 * header, so read relative to the network header. */
static __always_inline __u32 sf_sport(struct __sk_buff *skb)
{
	__u8 vihl = 0;
	__u16 sport = 0;
	__u32 off;

	if (skb->protocol == bpf_htons(ETH_P_IP)) {
		if (bpf_skb_load_bytes_relative(skb, 0, &vihl, 1, BPF_HDR_START_NET))
			return 0;
		off = (vihl & 0x0f) * 4;
	} else if (skb->protocol == bpf_htons(ETH_P_IPV6)) {
		off = 40;
	} else {
		return 0;
	}
	if (bpf_skb_load_bytes_relative(skb, off, &sport, 2, BPF_HDR_START_NET))
		return 0;
	return bpf_ntohs(sport);
}

SEC("socket")
int steer_queue(struct __sk_buff *skb)
{
	__u32 zero = 0, worker = NO_SLOT, index = NO_SLOT, qm = skb->queue_mapping;
	struct steer_cfg *c = bpf_map_lookup_elem(&cfg, &zero);
	__u32 *gi;

	if (!c || c->n == 0)
		return NO_SLOT;
	/* qm < offset: a driver that records queue + 1 did not record one. */
	if (qm >= c->queue_offset) {
		worker = (qm - c->queue_offset) % c->n;
		gi = bpf_map_lookup_elem(&group_index, &worker);
		if (gi)
			index = *gi;
	}
	count(index == NO_SLOT ? MAX_WORKERS : worker);
	if (c->observe)
		observe(sf_sport(skb), qm, 0, worker, index, 0);
	return index;
}

SEC("sk_reuseport")
int steer_select(struct sk_reuseport_md *md)
{
	__u32 zero = 0, worker = NO_SLOT, cpu, hash = md->hash;
	struct steer_cfg *c = bpf_map_lookup_elem(&cfg, &zero);
	__u16 sport = 0;
	__s32 err = -1;
	__u32 *w;

	if (!c || c->n == 0)
		return SK_PASS;
	if (c->mode == MODE_CPU) {
		cpu = bpf_get_smp_processor_id();
		w = bpf_map_lookup_elem(&cpu_worker, &cpu);
		if (w && *w)
			worker = *w - 1;
	} else if (c->mode == MODE_HASH) {
		worker = hash % c->n;
	}
	if (worker < c->n)
		err = bpf_sk_select_reuseport(md, &socks, &worker, 0);
	count(err == 0 ? worker : MAX_WORKERS);
	if (c->observe) {
		/* md->data starts at the TCP header. */
		bpf_skb_load_bytes(md, 0, &sport, 2);
		observe(bpf_ntohs(sport), NO_SLOT, hash, worker, worker, err);
	}
	/* No selection (err != 0) leaves the choice to the kernel's hash. */
	return SK_PASS;
}

char _license[] SEC("license") = "GPL";
