-- DistCache coherence protocol (issue 15): a model for the Murphi model checker Rumur,
-- written from the protocol as specified (docs/protocol.md, "Coherence" and "Model-checked").
-- model/run.py sets the constants below per configuration, generates the verifier and runs it.
--
-- Actors and what each may do (every rule below is one atomic step; any interleaving):
--   * one storage server: its shim (per-key lock; writes: phase 1 on one path per live spine
--     that may hold the key, else one to the leaf, a leaf-only path when every spine path was
--     released, Redis + answer, phase 2; populates; the view `cached`/`known`; the down-set;
--     the dedup table of retried writes) and its Redis (values and the write markers);
--   * cache switches: spines 1..NSP and the storage leaf LEAF, NSLOT slots each, registers
--     valid/value/rec and cache_epoch, all zeroed by a switch restart;
--   * one agent per switch: insert (a version the slot never had in this epoch, saved before
--     the table write; then Populate), evict (table entry first, then Evict to the shim),
--     restarts with or without its state file, the epoch bump when its state does not match
--     the switch, the switch came up empty or a counter wraps, and populating again every
--     entry that is not valid (after a bump, or a populate that failed or was refused);
--   * the controller: failover (reads routed away, then shims told down), recovery (shims
--     told up, the agent flushes the cache, reads back; a failed flush leaves it failed), the
--     cached-key view it collects from the agents and pushes to a restarted shim, down-set
--     pushes, mechanism changes, its restarts with and without state;
--   * clients: writes (PUT, or DELETE / a value too large to cache) retried with the same id,
--     and reads; a copy of a write the shim's dedup table has no room for is refused BUSY
--     (nothing written, and the refusal recorded in Redis like an ERROR: shim/dedup.go);
--   * a network that loses, duplicates (up to CAP copies of a packet), delays and reorders
--     everything: a multiset of counters net[op][seq][target];
--   * a spine's data plane that dies while its P4Runtime server and agent go on (tests/: the
--     eBPF injector drops every DistCache packet to and from it): its registers are kept, every
--     coherence packet to it is lost and no read is answered by it until it revives; the
--     controller may declare it dead (failover as for a crash) or not (a death shorter than
--     its detection: leaves route around it and use it again once they hear from it).
--
-- Abstractions (each keeps every behaviour of the system, or says which bound it is):
--   * A packet's key, value, populate flag and tag are fixed by its seq (one shim job per
--     seq), so a packet is (op, seq, target); sq[seq] holds the rest.  The shim's seq
--     grows across restarts (it starts from the clock); RFC 1982 wrap is not modelled.
--   * Reads are not steps but what the state lets a read return: a read sent now is answered
--     by a switch's cache if the entry is valid there and reads may go there, else by Redis,
--     which always holds the newest committed value.  A client may have read Redis just
--     before, so a cached value older than the newest committed one is a stale read.  A switch
--     reads no longer go to (failover, NoCache) can still answer a read sent before the
--     change: it is held to the floors of that moment (offack, offcom), the latest such a
--     read can have.  This needs no read in flight in the state and checks every instant.
--   * Reads may go to every spine in service whatever the mechanism, and agents may insert
--     and evict any key they are allowed to hold at any time: that covers DistCache,
--     CacheReplication, CachePartition and Hybrid, and any change between them, at once.
--     NoCache is a mechanism of its own: reads go to the servers and agents do not insert.
--   * An INVALIDATE_ACK counts as received when its target reflects it: an ack lost or late
--     is a shim that times out (a timeout is always possible) or acts later.
--   * The partition (which spine owns which keys) only decides which keys agents insert and
--     where reads go, both left free above; writes do not depend on it (shim/view.go paths).
--   * Redis is one process that never loses an acknowledged write (appendfsync always); its
--     restarts, and the shim's refresh after one, are not modelled.  The write markers are
--     always there to ask (the shim asks for 30 s after it starts, and they live 30 s).
--   * Bounds (constants below): keys, spines, slots, writes, insertions and repopulates, seq
--     numbers, epochs and versions, copies of a packet, and a budget per fault kind and in all.
--     One populate per switch at a time.
--
-- Safety (the invariants at the end and two assertions; each message starts with its name):
--   OtherKey        a read of key k can return a value written for another key
--   ErrorValue      a read can return the value of a write answered ERROR or BUSY
--   Uncommitted     a read can return a value storage never held
--   StaleAfterAck   a read can return a value older (in Redis's commit order) than the newest
--                   write acknowledged before it began
--   StaleAfterRead  a read can return a value older than one a read that ended before it
--                   began returned (or could have: Redis's newest committed value)
--   Holders         a switch not declared down holds a valid copy of k that the shim does not
--                   count among k's holders (cached[k] or an unknown switch): writes would skip it
--   DoubleAck       a write is answered twice with different outcomes (procedure Reply)
--   DoubleApply     a write is applied to storage twice (procedure Commit)
-- With writes ordered by Redis's commit order these are linearizability of each key's
-- history; a write counts as acknowledged when the shim sends the answer (the earliest a
-- client can see it, so the check is the strictest).

const
  NK: 2;              -- keys (both stored on the one server, so both can sit in the leaf's slot)
  NSP: 2;             -- spines
  NSLOT: 1;           -- slots per switch: with 1, keys take turns in every slot (tenures, tags)
  NW: 2;              -- client writes
  WRITE_KEYS: 1;      -- writes go to keys 1..WRITE_KEYS
  ALLOW_NC: false;    -- a write may be a DELETE or a value over 128 B (never cached, no phase 2)
  ALLOW_TTL: false;   -- a write may give its value a time to live: never cached (no phase 2, no populate
                      -- fills it), and Redis may expire it at any time after it is committed
  B_EXP: 0;           -- expiries (Redis deletes a key whose value has a TTL, without the shim)
  K1_SPINES: 2;       -- key 1 may be cached at the leaf and at spines 1..K1_SPINES
  K2_SPINES: false;   -- key 2 may be cached at the spines too (always at the leaf)
  MAXSEQ: 5;          -- coherence seq numbers the shim hands out in a trace (writes + populates)
  B_INS: 3;           -- cache insertions in a trace (a bound, not a fault)
  B_REPOP: 2;         -- populates of an entry again (after an epoch bump or a failed populate)
  EMAX: 2;            -- highest cache_epoch
  VMAX: 2;            -- versions per slot and epoch (then the counter wraps: epoch bump)
  CAP: 2;             -- copies of one packet in flight

  -- fault budgets (per trace): at most B_FAULTS faults in all, at most B_x of kind x
  B_FAULTS: 11;
  B_LOSS: 1;          -- packets lost
  B_DUP: 1;           -- packets duplicated
  B_SHIM: 1;          -- shim restarts (with or without its state file)
  B_AGENT: 1;         -- agent restarts (with or without its state file)
  B_CTRL: 1;          -- controller restarts (with or without its state)
  B_CRASH: 1;         -- spine process crashes (registers and tables lost; restarted later)
  B_FAIL: 1;          -- spine failovers (detected or by the operator), each followed by recovery
  B_MECH: 1;          -- mechanism changes (to NoCache and back)
  B_DPDEAD: 1;        -- a spine's data plane dies while its P4Runtime server answers (revives later)
  B_LEAF: 1;          -- the storage leaf is failed by the controller (fail --keep-running, a stall past
                      -- its probes, a kernel leaf whose process died): its data plane goes on; recovered
                      -- later, with or without a flush
  B_CLDIE: 1;         -- a kernel client leaf's process dies and its programs go on routing by the routes
                      -- they had, until the controller takes them down (fences it)
  B_BUSY: 0;          -- copies of a write refused BUSY (the shim's dedup table at its memory bound)
  B_VIEW: 1;          -- cached-key views the controller collects for the shim (not a fault)

  -- seeded bugs: each must yield a counterexample (tests/unit/test_model.py)
  BUG_ACK_BEFORE_P1: false;     -- write Redis and acknowledge before phase 1
  BUG_DEAD_SPINE_DONE: false;   -- a spine declared down completes its pending paths (no leaf-only path)
  BUG_NO_EPOCH_BUMP: false;     -- an agent without state resets its counters, same epoch
  BUG_ANY_INV_ARMS: false;      -- any INVALIDATE arms a new tenure, not only its own populate
  BUG_SHIM_TRUSTS_VIEW: false;  -- a restarted shim takes its empty view as complete (known = all)
  BUG_DP_NO_FLUSH: false;       -- a spine failed for its data plane is recovered without the flush (it
                                -- did not restart and its agent kept running: its cache looks intact)
  BUG_REJOIN_DOWN: false;       -- a down-set pushed while a spine is being brought back (told up, flushed,
                                -- warmed before its routes) names it down again
  BUG_LEAF_DOWN: false;         -- a failed storage leaf is in the shims' down-set (dropped from every key's
                                -- holders), as every failed non-spine switch was before
  BUG_DP_FROM_PROCESS: false;   -- a client leaf whose process is gone is taken for one that routes nothing
                                -- (its kernel programs still route): the shims stop waiting for a spine
                                -- it still sends reads to
  BUG_TTL_CACHED: false;        -- a value with a TTL is cached like any other (populates fill it, phase 2
                                -- updates it): once Redis expires it, a switch still serves it
  BUG_BUSY_FORGETS: false;      -- a BUSY refusal is not recorded in Redis (the table has no room to
                                -- remember it either): a later copy of the write is applied after all

  -- the changes the model found the protocol needed; it is specified and implemented with all
  -- of them (docs/protocol.md).  Each set false is the protocol as it was specified before, and
  -- gives a counterexample (model/run.py's "findings" suite, model/README.md)
  FIX_UNARMED_FLOOR: true;      -- any INVALIDATE records its seq for a new tenure; only its populate arms it
  FIX_DOWNSET_FIRST: true;      -- a shim restarted without state populates no spine before it has the down-set
  FIX_CLAIM_VERSIONS: true;     -- after an epoch bump a slot's counter restarts at its entry's version
  FIX_EPOCH_CLOCK: true;        -- a new epoch is above every epoch the switch ever had; a fresh switch gets one
  FIX_VIEW_INCARNATION: true;   -- a view applies only to the shim life it was collected for
  FIX_ERROR_MARKER: true;       -- an ERROR answer is recorded in Redis like an applied write
  FIX_POPULATE_SLOT: true;      -- a populate arms only the entry in the slot it was asked for (versions
                                -- count per slot, so the key's next entry in another slot can have its tag)

  NSW: NSP + 1;       -- switches: spines 1..NSP, then the storage leaf
  LEAF: NSP + 1;
  NVAL: NK + NW;      -- values: 1..NK the initial value of each key, NK+w the value of write w

type
  key_t: 1..NK;
  sw_t: 1..NSW;
  spine_t: 1..NSP;
  slot_t: 0..NSLOT - 1;
  wid_t: 1..NW;
  val_t: 0..NVAL;
  seq_t: 0..MAXSEQ;
  sidx_t: 1..MAXSEQ;
  ep_t: 0..EMAX;
  ver_t: 0..VMAX;
  cidx_t: 0..NW + B_EXP;   -- commits of a key: writes and expiries
  cnt_t: 0..CAP;
  tag_t: record e: ep_t; v: ver_t; end;      -- v = 0: no tag
  op_t: enum { INV, UPD };
  path_t: enum { P_NONE, P_PEND, P_ACK, P_REL };   -- P_REL: its spine was declared down
  wst_t: enum { J_NONE, J_WAIT, J_P1 };
  pst_t: enum { PJ_NONE, PJ_REQ, PJ_P1 };
  dd_t: enum { D_NONE, D_RUN, D_DONE };
  out_t: enum { O_NONE, O_OK, O_ERR, O_BUSY };   -- O_ERR, O_BUSY: nothing was written
  cph_t: enum { C_UP, C_F1, C_DOWN, C_R1, C_R2 };    -- a spine's failover and recovery steps

  entry_t: record present: boolean; slot: slot_t; ver: ver_t; end;
  rec_t: record tag: tag_t; seq: seq_t; armed: boolean; end;
  switch_t: record
    up: boolean;
    epoch: ep_t;
    tbl: array[key_t] of entry_t;
    valid: array[slot_t] of tag_t;
    value: array[slot_t] of val_t;
    rec: array[slot_t] of rec_t;
  end;
  agent_t: record
    synced: boolean;                 -- false from its switch's restart until it reconciles
    fok: boolean;                    -- its state file is usable
    epoch: ep_t;                     -- the epoch its state is for
    ctr: array[slot_t] of ver_t;     -- per-slot version counters (saved before each table write)
  end;
  seqinfo_t: record key: 0..NK; pop: boolean; tgt: 0..NSW; tag: tag_t; slot: slot_t; val: val_t; end;
  wjob_t: record st: wst_t; seq: seq_t; acked: boolean; path: array[sw_t] of path_t; end;
  pjob_t: record st: pst_t; key: 0..NK; tag: tag_t; slot: slot_t; seq: seq_t; end;
  view_t: record ok: boolean; cov: array[sw_t] of boolean; c: array[key_t] of array[sw_t] of boolean; end;

var
  -- data plane
  sw: array[sw_t] of switch_t;
  eclock: array[sw_t] of ep_t;       -- ghost: the highest epoch each switch ever had
  net: array[op_t] of array[sidx_t] of array[sw_t] of cnt_t;   -- packets on their way to the leaf
  req: array[wid_t] of cnt_t;        -- client write requests in flight
  sq: array[sidx_t] of seqinfo_t;    -- what the packets of each seq number carry
  -- agents
  ag: array[sw_t] of agent_t;
  bins: 0..B_INS;
  brepop: 0..B_REPOP;
  -- shim
  seqctr: seq_t;                     -- grows across restarts
  known: array[sw_t] of boolean;
  cached: array[key_t] of array[sw_t] of boolean;
  sdown: array[spine_t] of boolean;
  dsknown: boolean;                  -- the shim has the controller's down-set (from its state or a push)
  dd: array[wid_t] of dd_t;          -- dedup table (memory): the reply is wout
  wj: array[wid_t] of wjob_t;
  pj: array[sw_t] of pjob_t;
  -- Redis
  redis: array[key_t] of val_t;
  marker: array[wid_t] of out_t;     -- written with the write (with FIX_ERROR_MARKER also on ERROR)
  -- controller and client-rack switches
  cph: array[spine_t] of cph_t;
  routed: array[spine_t] of boolean; -- client leaves send reads to it
  dpdead: array[spine_t] of boolean; -- its data plane is dead: packets to it lost, no read answered
  cdp: array[spine_t] of boolean;    -- failed for its data plane (only written with BUG_DP_NO_FLUSH)
  ldown: boolean;                    -- the controller has the storage leaf failed (its data plane goes on)
  clstuck: boolean;                  -- a client leaf's process died, its kernel programs still route
  clold: array[spine_t] of boolean;  -- the spines those programs send reads to (routed, as it died)
  nocache: boolean;                  -- the mechanism is NoCache
  vs: view_t;
  -- the history (ghost)
  wkey: array[wid_t] of 0..NK;
  wnc: array[wid_t] of boolean;
  wttl: array[wid_t] of boolean;     -- the write gave its value a time to live
  wc: array[wid_t] of cidx_t;        -- position in the key's commit order (0: not committed)
  wout: array[wid_t] of out_t;       -- the answer the shim sent
  ccount: array[key_t] of cidx_t;
  offack: array[sw_t] of array[key_t] of cidx_t;    -- the floors when reads last stopped going to a switch
  offcom: array[sw_t] of array[key_t] of cidx_t;
  -- remaining fault budgets
  bloss: 0..B_LOSS; bdup: 0..B_DUP; bshim: 0..B_SHIM;
  bagent: 0..B_AGENT; bctrl: 0..B_CTRL; bcrash: 0..B_CRASH; bfail: 0..B_FAIL; bmech: 0..B_MECH;
  bdpdead: 0..B_DPDEAD;
  bleaf: 0..B_LEAF; bcldie: 0..B_CLDIE;
  bbusy: 0..B_BUSY;
  bexp: 0..B_EXP;
  bview: 0..B_VIEW;
  bfaults: 0..B_FAULTS;
  bad: 0..6;                         -- ghost: the invariant broken (Check), 0 if none

------------------------------------------------------------------------------------------
-- helpers

function other(s: spine_t): spine_t;
begin
  if s = 1 then return NSP; else return 1; end;
end;

function keyof(v: val_t): 0..NK;
begin
  if v = 0 then return 0; end;
  if v <= NK then return v; end;
  return wkey[v - NK];
end;

function cval(v: val_t): cidx_t;   -- position of a value in its key's commit order
begin
  if v <= NK then return 0; end;
  return wc[v - NK];
end;

function cacheable(v: val_t): boolean;
begin
  if v = 0 then return false; end;
  if v <= NK then return true; end;
  return !wnc[v - NK];
end;

function mktag(e: ep_t; v: ver_t): tag_t;
var t: tag_t;
begin
  t.e := e; t.v := v; return t;
end;

function etag(s: sw_t; k: key_t): tag_t;      -- the tag of k's entry at s: epoch ++ version
begin
  return mktag(sw[s].epoch, sw[s].tbl[k].ver);
end;

-- the value a read of k (from any client, any time) is answered with from s's cache, 0 if it is not a hit there:
-- the entry is there and its slot holds the entry's tag (epoch ++ version) as valid
function served(s: sw_t; k: key_t): val_t;
var l: slot_t;
begin
  if !sw[s].up | !sw[s].tbl[k].present then return 0; end;
  l := sw[s].tbl[k].slot;
  if sw[s].valid[l].v != sw[s].tbl[k].ver | sw[s].valid[l].e != sw[s].epoch then return 0; end;
  return sw[s].value[l];                       -- (never 0: only cacheable values are filled)
end;

function lockheld(k: key_t): boolean;
begin
  for w: wid_t do
    if wj[w].st = J_P1 & wkey[w] = k then return true; end;
  end;
  for s: sw_t do
    if pj[s].st = PJ_P1 & pj[s].key = k then return true; end;
  end;
  return false;
end;

function slotfree(s: sw_t; l: slot_t): boolean;
begin
  for k: key_t do
    if sw[s].tbl[k].present & sw[s].tbl[k].slot = l then return false; end;
  end;
  return true;
end;

function may_cache(s: sw_t; k: key_t): boolean;
begin
  if s = LEAF then return true; end;
  if k = 1 then return s <= K1_SPINES; end;
  return K2_SPINES;
end;

function cdown(s: spine_t): boolean;          -- the controller has the shims treat it as down
begin
  -- a spine being recovered (C_R1, C_R2) is up in every push: controller/shims.py shim_down skips
  -- the spines recover() is bringing back (_rejoining), whose warm-up runs off the controller's lock
  if BUG_REJOIN_DOWN & (cph[s] = C_R1 | cph[s] = C_R2) then return true; end;
  return cph[s] = C_DOWN;
end;

function dpalive(t: sw_t): boolean;           -- its data plane forwards (the storage leaf's always does)
begin
  if t = LEAF then return true; end;
  return !dpdead[t];
end;


procedure send(o: op_t; q: sidx_t; t: sw_t);
begin
  -- a copy beyond CAP is as if lost (the network may lose anything)
  if net[o][q][t] < CAP then net[o][q][t] := net[o][q][t] + 1; end;
end;

function ackfloor(k: key_t): cidx_t;        -- the newest write of k acknowledged (commit order)
var f: cidx_t;
begin
  f := 0;
  for w: wid_t do
    if wkey[w] = k & wout[w] = O_OK & wc[w] > f then f := wc[w]; end;
  end;
  return f;
end;

procedure routing_off(s: sw_t);               -- reads stop going to s: remember the floors
begin
  for k: key_t do offack[s][k] := ackfloor(k); offcom[s][k] := ccount[k]; end;
end;

------------------------------------------------------------------------------------------
-- switch processing (p4src/include/control/coherence.p4, cache.p4)

procedure sw_inv(s: sw_t; q: sidx_t);
var k: key_t; l: slot_t; t: tag_t; own: boolean;
begin
  k := sq[q].key;
  if sw[s].tbl[k].present then
    l := sw[s].tbl[k].slot;
    t := etag(s, k);
    sw[s].valid[l] := mktag(0, 0);                                -- always: clearing is safe
    sw[s].value[l] := 0;                  -- (model: an invalid slot's value is never read again)
    own := sq[q].pop & sq[q].tgt = s & sq[q].tag = t             -- this entry's own populate
           & (!FIX_POPULATE_SLOT | sq[q].slot = l);
    if sw[s].rec[l].tag = t then
      if q >= sw[s].rec[l].seq then                               -- re-arm only if not older
        sw[s].rec[l].seq := q;
        if own then sw[s].rec[l].armed := true; end;
      end;
    elsif BUG_ANY_INV_ARMS | own then                             -- a new tenure: its own populate
      sw[s].rec[l].tag := t; sw[s].rec[l].seq := q; sw[s].rec[l].armed := true;
    elsif FIX_UNARMED_FLOOR then                                  -- recorded, not armed
      sw[s].rec[l].tag := t; sw[s].rec[l].seq := q; sw[s].rec[l].armed := false;
    end;
  end;
end;

procedure sw_upd(s: sw_t; q: sidx_t);
var k: key_t; l: slot_t; t: tag_t;
begin
  k := sq[q].key;
  if sw[s].tbl[k].present then
    l := sw[s].tbl[k].slot;
    t := etag(s, k);
    if sw[s].rec[l].tag = t & sw[s].rec[l].seq = q & sw[s].rec[l].armed then
      sw[s].value[l] := sq[q].val;
      sw[s].valid[l] := t;
    end;
  end;
end;

procedure sw_reset(s: sw_t);                   -- a switch process (re)starts: everything zero
begin
  clear sw[s].tbl;
  clear sw[s].valid;
  clear sw[s].value;
  clear sw[s].rec;
  sw[s].epoch := 0;
end;

------------------------------------------------------------------------------------------
-- the checks

procedure Reply(w: wid_t; o: out_t);
var k: key_t;
begin
  k := wkey[w];
  assert (wout[w] = O_NONE | wout[w] = o) "DoubleAck: a write answered twice with different outcomes";
  wout[w] := o;
  dd[w] := D_DONE;
  if o = O_ERR & FIX_ERROR_MARKER & marker[w] = O_NONE then
    marker[w] := O_ERR;                        -- SET NX before the answer (shim/serve.go refuseWrite)
  end;
end;

------------------------------------------------------------------------------------------
-- shim

procedure Commit(w: wid_t);
var k: key_t;
begin
  k := wkey[w];
  assert (wc[w] = 0) "DoubleApply: a write applied to storage twice";
  ccount[k] := ccount[k] + 1;
  wc[w] := ccount[k];
  redis[k] := NK + w;
  marker[w] := O_OK;                           -- the applied marker, in the same MULTI/EXEC
end;

-- forget what a seq number's packets carried once none is left and no job uses it (the number
-- itself may stay in a rec register): states that differ only there are the same state
procedure gcseq(q: sidx_t);
begin
  for o: op_t do for t: sw_t do
    if net[o][q][t] > 0 then return; end;
  end; end;
  for w: wid_t do if wj[w].st != J_NONE & wj[w].seq = q then return; end; end;
  for t: sw_t do if pj[t].st != PJ_NONE & pj[t].seq = q then return; end; end;
  clear sq[q];
end;

procedure endwrite(w: wid_t);
var q: seq_t;
begin
  q := wj[w].seq;
  clear wj[w];
  if q != 0 then gcseq(q); end;
end;

procedure endpop(s: sw_t);
var q: seq_t;
begin
  q := pj[s].seq;
  clear pj[s];
  if q != 0 then gcseq(q); end;
end;

function newseq(k: key_t; pop: boolean; t: 0..NSW; g: tag_t; l: slot_t; v: val_t): sidx_t;
var q: sidx_t;
begin
  q := seqctr + 1;
  seqctr := q;
  sq[q].key := k; sq[q].pop := pop; sq[q].tgt := t; sq[q].tag := g; sq[q].slot := l; sq[q].val := v;
  return q;
end;

-- shim/view.go holders(): a switch not declared down that may hold a copy of k (an agent's
-- populate added it and no evict removed it), or whose cached keys the shim does not know.  The
-- storage leaf is never declared down (controller/shims.py shim_down names spines only: the leaf is
-- on every path to the shim, and a failed one may still answer reads from its cache)
function holds(t: sw_t; k: key_t): boolean;
begin
  if t != LEAF then
    if sdown[t] then return false; end;
  elsif BUG_LEAF_DOWN & ldown then
    return false;
  end;
  return cached[k][t] | !known[t];
end;

-- write w takes its key's lock: phase 1 (or no phase at all for a key nothing caches)
procedure StartWrite(w: wid_t);
var k: key_t; anyc: boolean; anysp: boolean; q: sidx_t; v: val_t;
begin
  k := wkey[w];
  anyc := false;
  for t: sw_t do
    if holds(t, k) then anyc := true; end;
  end;
  if !anyc then
    Commit(w); Reply(w, O_OK); endwrite(w);
    return;
  end;
  if wnc[w] then v := 0; else v := NK + w; end;
  q := newseq(k, false, 0, mktag(0, 0), 0, v);
  wj[w].seq := q;
  wj[w].st := J_P1;
  if BUG_ACK_BEFORE_P1 then
    Commit(w); Reply(w, O_OK); wj[w].acked := true;
  end;
  -- shim/view.go paths(): one path (through the leaf) to each spine that may hold k; if
  -- there is none, the leaf may (else the write had no phase 1): a path ending at the leaf
  anysp := false;
  for s: spine_t do
    if holds(s, k) then
      wj[w].path[s] := P_PEND; send(INV, q, s); anysp := true;
    end;
  end;
  if !anysp then
    wj[w].path[LEAF] := P_PEND; send(INV, q, LEAF);
  end;
end;

-- every path acked: write Redis, answer the client, phase 2 along the paths that acked.
-- (Model: the job, and the key's lock, end when phase 2 is sent.  Holding the lock longer only
-- delays the key's next write or populate, as a later request would; retransmitting an UPDATE
-- sends a copy of it, which the network's duplication and delay already do.)
procedure FinishP1(w: wid_t);
begin
  if !wj[w].acked then Commit(w); Reply(w, O_OK); end;
  if wnc[w] then endwrite(w); return; end;
  for t: sw_t do
    if wj[w].path[t] = P_ACK then send(UPD, wj[w].seq, t); end;
  end;
  endwrite(w);
end;

-- a path of phase 1 ended (acked, or released: its spine was declared down).  shim/coherence.go
-- invalidatePaths(): once none is pending, if none acked (an acked path passed the leaf) and
-- the leaf may hold k, the same INVALIDATE goes on a path ending at the leaf; else phase 1 is
-- done (with no path acked and the leaf holding nothing: no phase 2)
procedure Advance(w: wid_t);
var any: boolean;
begin
  any := false;
  for t: sw_t do
    if wj[w].path[t] = P_PEND then return; end;
    if wj[w].path[t] = P_ACK then any := true; end;
  end;
  if !any & wj[w].path[LEAF] = P_NONE & holds(LEAF, wkey[w]) then
    wj[w].path[LEAF] := P_PEND; send(INV, wj[w].seq, LEAF);
    cover "a dead spine's pending path was replaced by a leaf-only path" true;
    return;
  end;
  FinishP1(w);
end;

-- the controller's SetPartition declares spine s down: shim/coherence.go release() ends every
-- exchange waiting on it as RELEASED, which does not count as acknowledged
procedure ShimDown(s: spine_t);
begin
  sdown[s] := true;
  for w: wid_t do
    if wj[w].st = J_P1 & wj[w].path[s] = P_PEND then
      if BUG_DEAD_SPINE_DONE then
        wj[w].path[s] := P_ACK;                      -- taken as acked: no leaf-only path
      else
        wj[w].path[s] := P_REL;
      end;
      Advance(w);
    end;
  end;
  -- a populate waiting on its ack ends ("down"; the agent tries again later).  One still
  -- waiting for the key's lock passed the check before: it goes on (shim/control.go populate)
  if pj[s].st = PJ_P1 then endpop(s); end;
end;

-- the INVALIDATE_ACK of path (q, t).  Taken as received when the target reflects it: an
-- acknowledgement lost or late is a shim that times out (always possible) or waits longer.
procedure Acked(q: sidx_t; t: sw_t);
begin
  for w: wid_t do
    if wj[w].st = J_P1 & wj[w].seq = q & wj[w].path[t] = P_PEND then
      wj[w].path[t] := P_ACK;
      Advance(w);                                 -- (the shim acting later changes nothing)
    end;
  end;
  if pj[t].st = PJ_P1 & pj[t].seq = q then
    if cacheable(sq[q].val) then
      send(UPD, q, t);
    end;                                -- (else Redis has nothing cacheable: nothing to fill)
    endpop(t);
  end;
end;

-- a packet travels its path: the storage leaf, then (unless the leaf is the target) the
-- target spine, which reflects an INVALIDATE as its acknowledgement.  (Model: both switches
-- process it in one step.  A switch's registers see only the order its own packets arrive
-- in, which the multiset leaves free; a read is a state predicate, so the moment between
-- the leaf and the spine adds nothing; a packet lost between them is rule "lost after the
-- leaf".)
procedure deliver(o: op_t; q: sidx_t; t: sw_t; reach: boolean);
begin
  if !sw[LEAF].up then return; end;
  if o = INV then sw_inv(LEAF, q); else sw_upd(LEAF, q); end;
  if t != LEAF then
    if !reach | !sw[t].up | !dpalive(t) then return; end;   -- lost on the way, a crashed spine, or
                                                             -- one whose data plane is dead
    if o = INV then sw_inv(t, q); else sw_upd(t, q); end;
  end;
  if o = INV then Acked(q, t); end;                  -- (UPDATE_ACKs only stop retransmissions)
end;

-- the populate takes the key's lock: Redis's value, a new seq, the INVALIDATE with the tag
procedure StartPop(s: sw_t);
var k: key_t; q: sidx_t; v: val_t;
begin
  k := pj[s].key;
  if cacheable(redis[k]) then v := redis[k]; else v := 0; end;
  q := newseq(k, true, s, pj[s].tag, pj[s].slot, v);
  pj[s].seq := q; pj[s].st := PJ_P1;
  send(INV, q, s);
end;

-- the agent asks the shim to populate k's entry at s (shim/control.go populate): refused
-- ("down") for a spine declared down, and with FIX_DOWNSET_FIRST for every spine while the
-- shim lacks the controller's down-set; else s is added to k's holders at once, before the
-- key's lock, and the shim starts when the lock is free
procedure PopRequest(s: sw_t; k: key_t);
begin
  if s != LEAF then
    if sdown[s] | (FIX_DOWNSET_FIRST & !dsknown) then
      cover "a populate was refused" true;
      return;                                        -- the agent tries again later
    end;
  end;
  cached[k][s] := true;
  pj[s].st := PJ_REQ; pj[s].key := k; pj[s].tag := etag(s, k); pj[s].slot := sw[s].tbl[k].slot;
  if !lockheld(k) & seqctr < MAXSEQ then StartPop(s); end;
end;

-- a write request reaches the shim (the first copy, a retry or a duplicate)
procedure Receive(w: wid_t);
begin
  if dd[w] != D_NONE then return; end;             -- running: dropped; done: the same reply again
  if marker[w] != O_NONE then                      -- not remembered, but Redis has its marker
    Reply(w, marker[w]);
    cover "a retried write was answered from its Redis marker" true;
    return;
  end;
  dd[w] := D_RUN; wj[w].st := J_WAIT;
  if !lockheld(wkey[w]) & seqctr < MAXSEQ then StartWrite(w); end;   -- else it waits
end;

-- a copy of a write the dedup table has no room for (shim/serve.go refuseBusy): not applied, and
-- not remembered in memory either (the table is full); the refusal is recorded in Redis with
-- SET NX, so a later copy is refused again (a marker already there: that outcome stands)
procedure RefuseBusy(w: wid_t);
begin
  if dd[w] != D_NONE | marker[w] != O_NONE then Receive(w); return; end;   -- remembered, or marked
  assert (wout[w] = O_NONE | wout[w] = O_BUSY) "DoubleAck: a write answered twice with different outcomes";
  wout[w] := O_BUSY;
  if !BUG_BUSY_FORGETS then marker[w] := O_BUSY; end;
  cover "a write refused BUSY" true;
end;

------------------------------------------------------------------------------------------
-- agents

-- the epoch the agent raises the switch to (agent/agent.py _next_epoch).  With
-- FIX_EPOCH_CLOCK it is above every epoch the switch ever had (the implementation takes the
-- wall clock's seconds and uses an epoch only once the clock passed it; eclock is that
-- clock); as specified before: one above the switch's and the state file's
function newepoch(s: sw_t): 0..EMAX + 1;
begin
  if FIX_EPOCH_CLOCK then return eclock[s] + 1; end;
  if ag[s].fok & ag[s].epoch > sw[s].epoch then return ag[s].epoch + 1; end;
  return sw[s].epoch + 1;
end;

function canbump(s: sw_t): boolean;
begin
  return newepoch(s) <= EMAX;
end;

-- the agent cannot vouch for the versions in the switch's registers: a new epoch.  The
-- entries present keep their versions (FIX_CLAIM_VERSIONS: claimed in the new epoch); their
-- tags changed, so each is invalid until the agent populates it again (rule "agent populates
-- an entry that is not valid")
procedure Bump(s: sw_t);
var e: ep_t;
begin
  e := newepoch(s);
  ag[s].epoch := e; ag[s].fok := true; clear ag[s].ctr;   -- its state file first
  sw[s].epoch := e;                                       -- then the switch
  if FIX_EPOCH_CLOCK then eclock[s] := e; end;
  for k: key_t do
    if sw[s].tbl[k].present then
      if FIX_CLAIM_VERSIONS then ag[s].ctr[sw[s].tbl[k].slot] := sw[s].tbl[k].ver; end;
    end;
  end;
end;

-- (re)connect to the switch (agent/agent.py connect, _adopt_epoch).  A switch that came
-- up empty (fresh: restarted, no pipeline yet) gets a new epoch with FIX_EPOCH_CLOCK; as
-- specified before, the agent took its epoch (0) and went on counting from its state.
-- Otherwise the state is kept if it is for the switch's epoch, else the agent bumps.
procedure Sync(s: sw_t; fresh: boolean);
begin
  ag[s].synced := true;
  if fresh then
    if FIX_EPOCH_CLOCK then Bump(s); else ag[s].fok := true; ag[s].epoch := sw[s].epoch; end;
    return;
  end;
  if ag[s].fok & ag[s].epoch = sw[s].epoch then return; end;
  if BUG_NO_EPOCH_BUMP & !ag[s].fok then
    clear ag[s].ctr; ag[s].fok := true; ag[s].epoch := sw[s].epoch;
    return;
  end;
  Bump(s);
end;

-- Sync stays within the epoch bound (a bound of the model, not of the protocol)
function cansync(s: sw_t; fresh: boolean): boolean;
begin
  if fresh then return !FIX_EPOCH_CLOCK | canbump(s); end;
  if ag[s].fok & ag[s].epoch = sw[s].epoch then return true; end;
  if BUG_NO_EPOCH_BUMP & !ag[s].fok then return true; end;
  return canbump(s);
end;

------------------------------------------------------------------------------------------
-- safety: what a read of key k can return now.  A read is answered by a switch's cache (if it
-- is valid there and reads go there), else by Redis, which always holds the newest committed
-- value.  Since a client may have read Redis just before, a cached value older than the
-- newest committed one is a stale read: after a newer acknowledged write (StaleAfterAck),
-- else after a newer value a finished read returned (StaleAfterRead).  A switch reads no
-- longer go to can still answer a read sent before: its floors are those of that moment.


-- a client leaf whose process died with its kernel programs on (clstuck) goes on sending reads by
-- the routes they had (clold), whatever the controller changes since, until it is fenced
function reads_go(s: sw_t): boolean;             -- a read sent now may be answered at s
begin
  if nocache then return false; end;
  if s = LEAF then return true; end;
  return routed[s] | (clstuck & clold[s]);
end;

function readable(s: sw_t; k: key_t): boolean;
begin
  return reads_go(s) & dpalive(s) & served(s, k) != 0;
end;

function late(s: sw_t; k: key_t): boolean;       -- only a read sent before a routing change
begin
  return !reads_go(s) & dpalive(s) & served(s, k) != 0;
end;

-- Check() evaluates every read invariant in one pass over the cache hits and keeps the first
-- one broken (in the order below) in the ghost variable bad; every rule calls it last, and the
-- invariants at the end read bad.  (bad is a function of the rest of the state, so it adds no
-- state; evaluating five invariant expressions in every state took two thirds of the time.)
procedure Check();
var v: val_t; fa: cidx_t; fc: cidx_t; b: 0..6; c: cidx_t;
begin
  b := 0;
  for k: key_t do
    fa := ackfloor(k); fc := ccount[k];
    for s: sw_t do
      v := served(s, k);
      if v != 0 then
        c := cval(v);
        if !dpalive(s) then                      -- a dead data plane answers no read (until it revives)
        elsif keyof(v) != k then b := 1;                                      -- OtherKey
        elsif v > NK & (wout[v - NK] = O_ERR | wout[v - NK] = O_BUSY) then if b = 0 | b > 2 then b := 2; end;  -- ErrorValue
        elsif v > NK & wc[v - NK] = 0 then if b = 0 | b > 3 then b := 3; end;      -- Uncommitted
        elsif reads_go(s) then
          if c < fa then if b = 0 | b > 4 then b := 4; end;                   -- StaleAfterAck
          elsif c < fc then if b = 0 then b := 5; end;                        -- StaleAfterRead
          end;
        else                                     -- a read sent before reads stopped going to s
          if c < offack[s][k] then if b = 0 | b > 4 then b := 4; end;
          elsif c < offcom[s][k] then if b = 0 then b := 5; end;
          end;
        end;
        if b = 0 & !holds(s, k) then
          if s = LEAF then b := 6; elsif !sdown[s] then b := 6; end;           -- Holders
        end;
      end;
    end;
  end;
  bad := b;
end;

------------------------------------------------------------------------------------------
-- rules: clients

ruleset w: wid_t; k: key_t; nc: boolean; ttl: boolean; dup: boolean; busy: boolean do
  rule "client sends a write (the shim receives it, or refuses it BUSY; the network may duplicate it)"
    wkey[w] = 0 & k <= WRITE_KEYS & (ALLOW_NC | !nc) & (ALLOW_TTL | !ttl) & !(nc & ttl) & (w = 1 | wkey[w - 1] != 0)
    & (dup -> (bdup > 0 & bfaults > 0)) & (busy -> (bbusy > 0 & bfaults > 0 & (dup -> bfaults > 1)))
  ==> begin
    wkey[w] := k; wttl[w] := ttl;
    wnc[w] := nc | (ttl & !BUG_TTL_CACHED);      -- a TTL's value is never cached (shim/redis.go valueOf)
    if dup then bdup := bdup - 1; bfaults := bfaults - 1; req[w] := 1; end;
    if busy then bbusy := bbusy - 1; bfaults := bfaults - 1; RefuseBusy(w); else Receive(w); end;
    Check();
  end;
end;

ruleset w: wid_t do
  rule "shim receives a copy of a write request"
    req[w] > 0
  ==> begin
    req[w] := req[w] - 1;
    Receive(w);
    Check();
  end;

  rule "shim refuses a copy of a write BUSY (its dedup table is at its memory bound)"
    req[w] > 0 & bbusy > 0 & bfaults > 0
  ==> begin
    req[w] := req[w] - 1;
    bbusy := bbusy - 1; bfaults := bfaults - 1;
    RefuseBusy(w);
    Check();
  end;

  rule "shim: the key's lock is free again, a waiting write starts phase 1"
    wj[w].st = J_WAIT & !lockheld(wkey[w]) & seqctr < MAXSEQ
  ==> begin
    StartWrite(w);
    Check();
  end;

  rule "shim: phase 1 not acked within 1 s; ERROR, Redis untouched"
    wj[w].st = J_P1
  ==> begin
    if !wj[w].acked then Reply(w, O_ERR); end;
    endwrite(w);
    Check();
  end;
end;

-- Redis expires a key whose value has a TTL: a commit of "no value" that no shim sees.  Reads of
-- Redis return nothing from then on; a cache still holding any value of the key is stale.
ruleset k: key_t; w: wid_t do
  rule "Redis expires a key whose value has a time to live"
    ALLOW_TTL & bexp > 0 & wttl[w] & wkey[w] = k & wc[w] != 0 & redis[k] = NK + w
  ==> begin
    bexp := bexp - 1;
    ccount[k] := ccount[k] + 1;
    redis[k] := 0;
    cover "a key expired in Redis" true;
    Check();
  end;
end;

------------------------------------------------------------------------------------------
-- rules: the network

ruleset o: op_t; q: sidx_t; t: sw_t do
  rule "a packet travels its path"
    net[o][q][t] > 0
  ==> begin
    for q2: sidx_t do
      if q2 < q & net[o][q2][t] > 0 then
        cover "a packet overtook an older one" true;
      end;
    end;
    net[o][q][t] := net[o][q][t] - 1;
    deliver(o, q, t, true);
    gcseq(q);
    Check();
  end;

  rule "the network loses a packet before the leaf"
    net[o][q][t] > 0 & bloss > 0 & bfaults > 0
  ==> begin
    bloss := bloss - 1; bfaults := bfaults - 1; net[o][q][t] := net[o][q][t] - 1;
    gcseq(q);
    Check();
  end;

  rule "the network loses a packet after the leaf"
    net[o][q][t] > 0 & t != LEAF & bloss > 0 & bfaults > 0
  ==> begin
    bloss := bloss - 1; bfaults := bfaults - 1; net[o][q][t] := net[o][q][t] - 1;
    deliver(o, q, t, false);
    gcseq(q);
    Check();
  end;

  rule "the network duplicates a packet"
    net[o][q][t] > 0 & net[o][q][t] < CAP & bdup > 0 & bfaults > 0
  ==> begin
    bdup := bdup - 1; bfaults := bfaults - 1; net[o][q][t] := net[o][q][t] + 1;
    Check();
  end;
end;

ruleset w: wid_t do
  rule "the network loses a write request"
    req[w] > 0 & bloss > 0 & bfaults > 0
  ==> begin
    bloss := bloss - 1; bfaults := bfaults - 1; req[w] := req[w] - 1;
    Check();
  end;

  rule "the network duplicates a write request"
    req[w] > 0 & req[w] < CAP & bdup > 0 & bfaults > 0
  ==> begin
    bdup := bdup - 1; bfaults := bfaults - 1; req[w] := req[w] + 1;
    Check();
  end;
end;

------------------------------------------------------------------------------------------
-- rules: agents and population

ruleset s: sw_t; k: key_t; l: slot_t do
  rule "agent inserts a key (invalid entry, fresh version) and asks the shim to populate it"
    bins > 0 & sw[s].up & ag[s].synced & !nocache & may_cache(s, k)
    & !sw[s].tbl[k].present & pj[s].st = PJ_NONE & slotfree(s, l) & (ag[s].ctr[l] < VMAX | canbump(s))
  ==> begin
    bins := bins - 1;
    if ag[s].ctr[l] = VMAX then
      Bump(s);
      cover "a version counter wrapped: epoch bumped" true;
    end;
    if sw[s].value[l] != 0 & keyof(sw[s].value[l]) != k then
      cover "a key took a slot that held another key's value" true;
    end;
    if s != LEAF then
      if cph[s] = C_R2 then
        -- controller/failover.py _rejoin: a recovering spine is warmed after its flush, before its routes
        cover "a recovering spine was warmed before reads were routed to it" true;
      end;
    end;
    ag[s].ctr[l] := ag[s].ctr[l] + 1;                 -- saved to the state file first
    sw[s].tbl[k].present := true; sw[s].tbl[k].slot := l; sw[s].tbl[k].ver := ag[s].ctr[l];
    PopRequest(s, k);
    Check();
  end;
end;

ruleset s: sw_t; k: key_t do
  -- the table entry first, then Evict(key, switch) to the shim.  (An Evict lost on the way,
  -- e.g. with an agent restart, only leaves the shim invalidating the switch for nothing.)
  rule "agent evicts a key; the shim hears Evict(key, switch)"
    sw[s].up & ag[s].synced & sw[s].tbl[k].present
  ==> begin
    clear sw[s].tbl[k];
    cached[k][s] := false;
    Check();
  end;

  -- after an epoch bump (every entry's tag changed), or when a populate failed or was
  -- refused (agent/agent.py _refill_all, fill_again: tried again every hit window).  Any
  -- entry that is not valid may be populated again at any time: a superset of both.
  rule "agent populates an entry that is not valid"
    brepop > 0 & sw[s].up & ag[s].synced & sw[s].tbl[k].present & pj[s].st = PJ_NONE
    & served(s, k) = 0
  ==> begin
    brepop := brepop - 1;
    PopRequest(s, k);
    Check();
  end;
end;

ruleset s: sw_t do
  rule "shim: the key's lock is free again, a waiting populate starts"
    pj[s].st = PJ_REQ & !lockheld(pj[s].key) & seqctr < MAXSEQ
  ==> begin
    StartPop(s);
    Check();
  end;

  rule "shim: a populate's INVALIDATE is not acked in time"
    pj[s].st = PJ_P1
  ==> begin
    endpop(s);
    Check();
  end;

  rule "agent reconnects to its restarted switch"
    sw[s].up & !ag[s].synced & cansync(s, true)
  ==> begin
    Sync(s, true);
    Check();
  end;
end;

-- an agent restart can Sync within the epoch bound (keep: with its state file)
function restartable(s: sw_t; keep: boolean): boolean;
begin
  if keep then return cansync(s, !ag[s].synced); end;
  if !ag[s].synced then return !FIX_EPOCH_CLOCK | eclock[s] < EMAX; end;
  if BUG_NO_EPOCH_BUMP then return true; end;
  if FIX_EPOCH_CLOCK then return eclock[s] < EMAX; end;
  return sw[s].epoch < EMAX;
end;

ruleset s: sw_t; keep: boolean do
  rule "agent restarts"
    bagent > 0 & bfaults > 0 & sw[s].up & restartable(s, keep)
  ==> begin
    bagent := bagent - 1; bfaults := bfaults - 1;
    if !keep then ag[s].fok := false; clear ag[s].ctr; ag[s].epoch := 0; end;
    Sync(s, !ag[s].synced);
    if keep then
      cover "agent restarted with its state" true;
    else
      cover "agent restarted without its state" true;
    end;
    Check();
  end;
end;

------------------------------------------------------------------------------------------
-- rules: spine processes

ruleset s: spine_t do
  rule "spine process crashes"
    bcrash > 0 & bfaults > 0 & sw[s].up
  ==> begin
    bcrash := bcrash - 1; bfaults := bfaults - 1;
    sw[s].up := false;
    Check();
  end;

  rule "spine process restarts (registers, tables and epoch zero)"
    !sw[s].up
  ==> begin
    sw_reset(s);
    sw[s].up := true;
    ag[s].synced := false;
    Check();
  end;

  -- its data plane stops forwarding while its P4Runtime server and its agent go on (registers,
  -- tables, epoch kept): every coherence packet to or from it is lost from now on, those in
  -- flight too, until it revives (deliver), and no read is answered by it (Check: a leaf excludes
  -- it, or a read sent to it is lost).  Nothing tells the shim: the shims do not look at leaves'
  -- liveness, only the controller's down-set.  (A packet delayed past the revival is a shim's
  -- retransmission: it retransmits every 50 ms for 1 s.)
  rule "a spine's data plane dies (its P4Runtime server and agent go on)"
    bdpdead > 0 & bfaults > 0 & !dpdead[s]
  ==> begin
    bdpdead := bdpdead - 1; bfaults := bfaults - 1;
    dpdead[s] := true;
    Check();
  end;

  -- it forwards again, with the registers it had: leaves that excluded it hear from it and use it
  -- again (reads_go: unless the controller routed reads away), with no flush in between
  rule "a spine's data plane revives"
    dpdead[s]
  ==> begin
    dpdead[s] := false;
    if cph[s] = C_UP & exists k: key_t do served(s, k) != 0 end then
      cover "a spine serves its copies again: its data plane revived before a failover" true;
    end;
    Check();
  end;
end;

------------------------------------------------------------------------------------------
-- rules: shim restarts, controller

ruleset keep: boolean do
  rule "shim restarts"
    bshim > 0 & bfaults > 0
  ==> begin
    bshim := bshim - 1; bfaults := bfaults - 1;
    clear wj; clear pj; clear dd;                       -- jobs, locks, dedup table: lost
    for q: sidx_t do gcseq(q); end;
    clear cached;
    for t: sw_t do known[t] := BUG_SHIM_TRUSTS_VIEW; end;
    if !keep then                                       -- no state file: no down-set
      for s: spine_t do sdown[s] := false; end;
      dsknown := false;
    end;
    if FIX_VIEW_INCARNATION then clear vs; end;
    if keep then
      cover "shim restarted with its state" true;
    else
      cover "shim restarted without its state" true;
    end;
    Check();
  end;

  rule "controller restarts"
    bctrl > 0 & bfaults > 0
  ==> begin
    bctrl := bctrl - 1; bfaults := bfaults - 1;
    clear vs;                                           -- a view being collected is lost
    if !keep then                                       -- reconcile: a spine reads do not reach is failed
      for s: spine_t do
        if routed[s] & !sdown[s] then cph[s] := C_UP; else cph[s] := C_F1; end;
        cdp[s] := false;                                -- (the reason a spine failed is lost)
      end;
    end;
    if keep then
      cover "controller restarted with its state" true;
    else
      cover "controller restarted without its state" true;
    end;
    Check();
  end;
end;

-- The controller reads the shim's incarnation, collects the cached keys from the agents that
-- answer (controller/shims.py) and pushes them (AddView: a union; those agents' switches
-- become known).  With FIX_VIEW_INCARNATION a view collected before the shim's restart is
-- refused, so a view is collected only while the shim misses one, and collecting and pushing
-- are one step.  (Reduction: a view pushed later than collected differs only by keys evicted
-- since, which it adds back, and switches restarted since, which come back empty; keys inserted
-- since are in the shim already, as each populate adds its switch.  Either only makes the
-- shim invalidate more.  Without the fix the two steps stay apart: that is the finding.)
procedure Collect();
begin
  vs.ok := true;
  for t: sw_t do
    vs.cov[t] := sw[t].up & ag[t].synced;
    for k: key_t do vs.c[k][t] := vs.cov[t] & sw[t].tbl[k].present; end;
  end;
end;

procedure PushView();
begin
  for t: sw_t do
    if vs.cov[t] then
      known[t] := true;
      for k: key_t do if vs.c[k][t] then cached[k][t] := true; end; end;
    end;
  end;
  clear vs;
end;

rule "controller collects the cached-key view from the agents and pushes it to the shim"
  FIX_VIEW_INCARNATION & bview > 0 & exists t: sw_t do !known[t] end
==> begin
  bview := bview - 1;
  Collect();
  PushView();
  Check();
end;

rule "controller collects the cached-key view from the agents"
  !FIX_VIEW_INCARNATION & bview > 0 & !vs.ok
==> begin
  bview := bview - 1;
  Collect();
  Check();
end;

rule "controller pushes the view to the shim"
  !FIX_VIEW_INCARNATION & vs.ok
==> begin
  PushView();
  Check();
end;

rule "controller pushes its partition and down-set to the shim"
  !dsknown | exists s: spine_t do sdown[s] != cdown(s) end
==> begin
  dsknown := true;
  for s: spine_t do
    if cdown(s) & !sdown[s] then ShimDown(s); end;
    if !cdown(s) then sdown[s] := false; end;
  end;
  Check();
end;

rule "mechanism change: to NoCache (routing first; agents then evict)"
  bmech > 0 & bfaults > 0 & !nocache
==> begin
  bmech := bmech - 1; bfaults := bfaults - 1;
  for t: sw_t do
    if t = LEAF | routed[t] then routing_off(t); end;
  end;
  nocache := true;
  Check();
end;

rule "mechanism change: back to a caching mechanism"
  nocache
==> begin
  nocache := false;
  for t: sw_t do
    if t = LEAF | routed[t] then clear offack[t]; clear offcom[t]; end;   -- (no longer used)
  end;
  Check();
end;

ruleset s: spine_t do
  -- controller/configure.py _fence: every client leaf's liveness_config fences the spine (one
  -- default write each, liveness.p4), so no read path takes it, before the partition's entries
  -- move; the moved partition then routes around it too.  Either way: routed[s] := false
  rule "failover 1: client leaves stop sending reads to the spine"
    bfail > 0 & bfaults > 0 & cph[s] = C_UP & cph[other(s)] = C_UP
  ==> begin
    bfail := bfail - 1; bfaults := bfaults - 1;
    if !nocache then routing_off(s); end;
    routed[s] := false;
    cph[s] := C_F1;
    Check();
  end;

  -- controller/monitor.py _dp_probe_loop: a spine whose probes go unanswered at every client
  -- leaf for 0.5 s is declared dead (declare_dead, DP_DEAD_REASON) and failed over like a crashed
  -- one, but its switch keeps its registers and its agent keeps running.  Any time after the
  -- death, or never (the death may end first); the death was the fault, this costs no budget
  rule "failover 1 (its data plane is dead): client leaves stop sending reads to the spine"
    dpdead[s] & cph[s] = C_UP & cph[other(s)] = C_UP
  ==> begin
    if !nocache then routing_off(s); end;
    routed[s] := false;
    cph[s] := C_F1;
    if BUG_DP_NO_FLUSH then cdp[s] := true; end;
    cover "the controller failed a spine over for its dead data plane" true;
    Check();
  end;

  -- one SetPartition(buckets, down) to the shims (shim/control.go setPartition): pending
  -- paths to the spine are released.  (The buckets move too: what partitions decide, which
  -- keys agents insert and where reads go, the model leaves free.)
  -- controller/shims.py shim_down: only once no client leaf may still send the spine reads: one
  -- whose process died is counted as routing by its old routes until its data plane is known gone
  -- (SwitchProcesses.data_plane_gone: fenced); with BUG_DP_FROM_PROCESS, as soon as its process is
  rule "failover 2: the shims are told the spine is down"
    cph[s] = C_F1 & (BUG_DP_FROM_PROCESS | !(clstuck & clold[s]))
  ==> begin
    if routed[s] & !nocache then routing_off(s); end;
    routed[s] := false;
    ShimDown(s);
    cph[s] := C_DOWN;
    Check();
  end;

  -- controller/failover.py recover(): once the switch and its agent answer, the shims
  -- stop skipping the spine (it owns no bucket yet), then its agent flushes its cache (evicts
  -- every entry), then the partition moves back and client leaves route reads to it.  The
  -- same for a spine failed for its data plane: the reconciler recovers it once its probes are
  -- answered again (_maybe_recover), an operator's `recover` at any time (its data plane may
  -- still be dead: recovery 1 does not ask)
  rule "recovery 1: the shims are told the spine is up"
    cph[s] = C_DOWN & sw[s].up & ag[s].synced
  ==> begin
    sdown[s] := false;
    cph[s] := C_R1;
    Check();
  end;

  rule "recovery 2: the spine's agent flushes its cache (evictions)"
    cph[s] = C_R1 & sw[s].up & ag[s].synced
  ==> begin
    if !cdp[s] then                                   -- (cdp only with BUG_DP_NO_FLUSH)
      for k: key_t do
        if sw[s].tbl[k].present then clear sw[s].tbl[k]; cached[k][s] := false; end;
      end;
    end;
    cdp[s] := false;
    cph[s] := C_R2;
    Check();
  end;

  -- the flush failed (agent or switch not answering, the controller restarted): the spine is
  -- still failed in the controller's state, whose next push declares it down again
  rule "recovery 2 fails: the spine stays failed"
    cph[s] = C_R1
  ==> begin
    cph[s] := C_DOWN;
    Check();
  end;

  rule "recovery 3: client leaves send reads to it again"
    cph[s] = C_R2
  ==> begin
    routed[s] := true;
    if !nocache then clear offack[s]; clear offcom[s]; end;             -- (no longer used)
    cph[s] := C_UP;
    cover "a spine recovered" true;
    Check();
  end;
end;

------------------------------------------------------------------------------------------
-- rules: leaves

-- controller/failover.py fail() or declare_dead() of the storage leaf: an operator's fail with
-- --keep-running, a leaf paused (SIGSTOP, a wedged host) past its probes and resumed, a kernel leaf
-- whose process died and whose programs go on.  Its data plane forwards and answers reads from its
-- cache all along (client leaves know nothing of it); the shims are not told (shim_down names spines
-- only), so every write goes on invalidating it.  (A pause itself is packets delayed: the network
-- already delays any packet any time.)
rule "controller fails the storage leaf; its data plane goes on"
  bleaf > 0 & bfaults > 0 & !ldown
==> begin
  bleaf := bleaf - 1; bfaults := bfaults - 1;
  ldown := true;
  Check();
end;

-- recover(): the leaf reconfigured and, with a flush, its agent evicts every entry first
ruleset flush: boolean do
  rule "controller recovers the storage leaf"
    ldown
  ==> begin
    if flush then
      for k: key_t do
        if sw[LEAF].tbl[k].present then clear sw[LEAF].tbl[k]; cached[k][LEAF] := false; end;
      end;
      cover "the storage leaf was recovered with a flush" true;
    else
      cover "the storage leaf was recovered without a flush" true;
    end;
    ldown := false;
    Check();
  end;
end;

-- the kernel target: a client leaf's process is SIGKILLed, its programs stay on its ports and go on
-- routing reads by the routes they had; routing changes no longer reach them
rule "a kernel client leaf's process dies; its programs go on routing"
  bcldie > 0 & bfaults > 0 & !clstuck
==> begin
  bcldie := bcldie - 1; bfaults := bfaults - 1;
  clstuck := true;
  for s: spine_t do clold[s] := routed[s]; end;
  Check();
end;

-- controller/failover.py _take_data_plane_down (declared dead, its process gone) or
-- SwitchProcesses.stop: its programs detached; its next process starts with the current routes
rule "the controller takes the dead client leaf's data plane down"
  clstuck
==> begin
  clstuck := false;
  clear clold;
  Check();
end;

------------------------------------------------------------------------------------------

startstate
begin
  for s: sw_t do
    sw_reset(s); sw[s].up := true;
    eclock[s] := 0;
    ag[s].synced := true; ag[s].fok := true; ag[s].epoch := 0; clear ag[s].ctr;
    known[s] := true;                 -- a fresh deployment: the shim knows nothing is cached
  end;
  clear net; clear req; clear sq;
  bins := B_INS;
  brepop := B_REPOP;
  seqctr := 0;
  clear cached;
  for s: spine_t do
    sdown[s] := false; cph[s] := C_UP; routed[s] := true; dpdead[s] := false; cdp[s] := false;
  end;
  ldown := false; clstuck := false; clear clold;
  dsknown := true;
  for k: key_t do
    redis[k] := k; ccount[k] := 0;
  end;
  clear dd; clear wj; clear pj; clear marker;
  nocache := false;
  clear vs;
  clear wkey; clear wnc; clear wttl; clear wc; clear wout; clear offack; clear offcom;
  bloss := B_LOSS; bdup := B_DUP; bshim := B_SHIM;
  bagent := B_AGENT; bctrl := B_CTRL; bcrash := B_CRASH; bfail := B_FAIL; bmech := B_MECH;
  bdpdead := B_DPDEAD;
  bleaf := B_LEAF; bcldie := B_CLDIE;
  bbusy := B_BUSY;
  bexp := B_EXP;
  bview := B_VIEW;
  bfaults := B_FAULTS;
  Check();
end;

------------------------------------------------------------------------------------------
-- safety (see Check above for what each means)

invariant "OtherKey: a read returned another key's value"
  bad != 1;

invariant "ErrorValue: a read returned the value of a write answered ERROR"
  bad != 2;

invariant "Uncommitted: a read returned a value storage never held"
  bad != 3;

invariant "StaleAfterAck: a read returned a value older than a write acknowledged before it began"
  bad != 4;

invariant "StaleAfterRead: a read returned a value older than one an earlier read returned"
  bad != 5;

invariant "Holders: a switch not declared down holds a valid copy the shim does not count as held"
  bad != 6;

------------------------------------------------------------------------------------------
-- every fault happens in some trace: an unreached cover is reported as an error

cover "fault: packet loss" bloss < B_LOSS;
cover "fault: packet duplication" bdup < B_DUP;
cover "fault: shim restart" bshim < B_SHIM;
cover "fault: agent restart" bagent < B_AGENT;
cover "fault: controller restart" bctrl < B_CTRL;
cover "fault: spine crash" bcrash < B_CRASH;
cover "fault: spine failover" bfail < B_FAIL;
cover "fault: mechanism change" bmech < B_MECH;
cover "fault: a data-plane death happens" bdpdead < B_DPDEAD;
cover "fault: the storage leaf failed" bleaf < B_LEAF;
cover "fault: a kernel client leaf's process died" bcldie < B_CLDIE;
cover "fault: view pushed" bview < B_VIEW;
cover "fault: a write refused BUSY" bbusy < B_BUSY;
cover "Redis expired a key" bexp < B_EXP;
-- (run.py drops a cover the configuration cannot reach line by line: each is one line)
cover "every fault kind happened in one trace" bloss < B_LOSS & bdup < B_DUP & bshim < B_SHIM & bagent < B_AGENT & bctrl < B_CTRL & bcrash < B_CRASH & bfail < B_FAIL & bmech < B_MECH & bdpdead < B_DPDEAD & bleaf < B_LEAF & bcldie < B_CLDIE;
cover "two writes of one key overlap" wkey[1] = wkey[NW] & wout[1] = O_NONE & wout[NW] = O_NONE & dd[1] = D_RUN & dd[NW] = D_RUN;
cover "a spine serves a value" exists s: spine_t do readable(s, 1) end;
cover "the leaf serves key 2" readable(LEAF, 2);
cover "a read sent before a routing change is answered from a cache" exists s: sw_t do late(s, 1) end;
