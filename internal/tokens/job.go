package tokens

import (
	"runtime"
	"sync"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
)

// job tokenizes the pieces one request found neither cached nor in flight.
// The caller queues them while it is still splitting the body (add), and
// the workers take them in order until the queue is closed and empty. When
// the request gives up (its budget or context ended) the job is abandoned:
// the pieces no worker took yet are not counted (their flights fail), so
// no work goes on past the budget but the pieces the workers are counting
// (one per worker, each a bounded cost: mergeLong). What was counted stays
// in the cache, so a resent body starts from there.
//
// So a worker may read a piece after the count returned, when the caller
// may reuse the body. The job either holds the body (artifact.Hold: the
// gateway's pooled body buffer stays out of reuse until the last worker is
// done, and an immutable body costs nothing) or copies every piece it
// queues. Copying a large cold body costs milliseconds, most of them
// faulting in fresh pages, before any counting can start.
type job struct {
	c    *Counter
	enc  *encoding
	body []byte
	hold artifact.Hold
	// bytes queued so far (the caller's only): counted in the backlog
	// until tokenized
	bytes  int64
	held   bool   // the body is held: pieces view it
	copies []byte // storage of piece copies when it is not

	procs int // workers at most: GOMAXPROCS, read once (it takes the scheduler's lock)

	mu      sync.Mutex
	more    sync.Cond // a piece was queued, or the queue closed
	flights []*flight
	pieces  [][]byte
	next    int  // the first piece no worker took
	closed  bool // no piece comes any more
	dropped bool // abandoned: the pieces not taken are not counted
	workers int  // started
	running int  // started and not yet returned
	release func()
}

func newJob(c *Counter, enc *encoding, body []byte, hold artifact.Hold) *job {
	j := &job{c: c, enc: enc, body: body, hold: hold, procs: runtime.GOMAXPROCS(0)}
	j.more.L = &j.mu
	return j
}

// add queues piece p of flight f, or fails f when the backlog is full:
// a request that would queue behind more than maxBacklog bytes of other
// work skips counting at once. A worker starts for each piece until there
// is one per P.
func (j *job) add(f *flight, p []byte) bool {
	n := int64(len(p))
	if pending := j.c.backlog.Add(n); pending > j.c.backlogMax && pending > j.bytes+n {
		j.c.backlog.Add(-n)
		j.c.land(f, 0, false)
		return false
	}
	var release func()
	if j.bytes == 0 && j.hold != nil {
		if release, j.held = j.hold(); !j.held {
			release = nil
		}
	}
	j.bytes += n
	if !j.held {
		p = j.copied(p)
	}
	j.mu.Lock()
	if release != nil {
		j.release = release
	}
	j.flights = append(j.flights, f)
	j.pieces = append(j.pieces, p)
	start := j.workers < j.procs
	if start {
		j.workers++
		j.running++
	}
	j.mu.Unlock()
	if start {
		go j.work()
	} else {
		j.more.Signal()
	}
	return true
}

// copied returns p copied into the job's storage. It grows by chunks of
// what is left of the body after p, up to a megabyte (or p's length if
// more), so the copies of a small body's misses take about its size.
func (j *job) copied(p []byte) []byte {
	if cap(j.copies)-len(j.copies) < len(p) {
		rest := len(j.body) - (cap(j.body) - cap(p)) // p starts at cap(body)-cap(p)
		j.copies = make([]byte, 0, max(len(p), min(rest, 1<<20)))
	}
	j.copies = append(j.copies, p...)
	return j.copies[len(j.copies)-len(p):]
}

// close ends the queue: the workers return once it is empty. A second
// close does nothing. The job lets go of the body (copied pieces do not
// keep the caller's array alive).
func (j *job) close() {
	j.body = nil
	j.mu.Lock()
	j.closed = true
	j.mu.Unlock()
	j.more.Broadcast()
}

// abandon closes the queue and drops the pieces no worker took: the
// request stopped waiting for them.
func (j *job) abandon() {
	j.mu.Lock()
	j.dropped = true
	j.mu.Unlock()
	j.close()
}

// take returns the next queued piece and its flight, waiting for one;
// false once the queue is closed and empty. The last worker to see that
// gives back the hold on the body. A worker that finds the job abandoned
// fails the flights of the pieces left.
func (j *job) take() ([]byte, *flight, bool) {
	j.mu.Lock()
	for j.next == len(j.pieces) && !j.closed {
		j.more.Wait()
	}
	if j.dropped && j.next < len(j.pieces) {
		pieces, flights := j.pieces[j.next:], j.flights[j.next:]
		j.next = len(j.pieces)
		j.mu.Unlock()
		for i, f := range flights {
			f.dropped = true
			j.c.land(f, 0, false)
			j.c.backlog.Add(-int64(len(pieces[i])))
		}
		j.mu.Lock()
	}
	if i := j.next; i < len(j.pieces) {
		j.next++
		p, f := j.pieces[i], j.flights[i]
		j.mu.Unlock()
		return p, f, true
	}
	j.running--
	var release func()
	if j.running == 0 {
		release, j.release = j.release, nil
	}
	j.mu.Unlock()
	if release != nil {
		release()
	}
	return nil, nil, false
}

// count counts piece p. A worker is a goroutine of its own, out of reach
// of the compiler's recover: a panic inside the tokenizer fails this piece
// (no token veto for the request) instead of the whole process.
func (j *job) count(r *ranks, hot *hotCounts, p []byte) (n int, ok bool) {
	defer func() {
		if recover() != nil {
			n, ok = 0, false
		}
	}()
	return j.c.memos[j.enc.id].count(j.enc, r, hot, p)
}

func (j *job) work() {
	r, err := j.enc.load()
	var hot *hotCounts
	if err == nil {
		hot = r.hot.get()
		defer r.hot.put(hot)
	}
	for {
		p, f, more := j.take()
		if !more {
			return
		}
		if h := j.c.beforePiece; h != nil {
			h()
		}
		n, ok := 0, false
		if err == nil {
			n, ok = j.count(r, hot, p)
		}
		j.c.land(f, n, ok)
		j.c.backlog.Add(-int64(len(p)))
		j.c.tokenized.Add(int64(len(p)))
		// A piece takes a millisecond or less; yielding between them lets
		// timers fire and waiting requests go on at once rather than at
		// the next preemption (10 ms) when all Ps are tokenizing.
		runtime.Gosched()
	}
}
