/*
 * rsprobe_trace.h: the trace of a stream's own buffer-manager calls, as recorded by the traced
 * copy of read_stream.c (see traced_copy.py) and read by the probe.
 */
#ifndef RSPROBE_TRACE_H
#define RSPROBE_TRACE_H

typedef enum RspTraceKind { RSP_EV_START = 1, RSP_EV_WAIT = 2 } RspTraceKind;
typedef struct RspTraceEvent {
    int32 kind;               /* RspTraceKind */
    int32 buffer;             /* first Buffer of the operation (after the call) */
    uint32 blocknum;          /* first block asked */
    int32 nblocks_asked;      /* *nblocks before StartReadBuffers (1 for StartReadBuffer) */
    int32 nblocks_accepted;   /* *nblocks after the call */
    int32 forwarded;          /* buffers already pinned that the stream passed in */
    int32 additional_pin_limit; /* last GetAdditionalPinLimit() the stream got before this start (-1 if none) */
    int32 flags;              /* READ_BUFFERS_* flags passed */
    bool  must_wait;          /* StartReadBuffers' result; for WAIT events: true */
    bool  has_result;         /* the call returned a value (a WAIT: once it returned; void: never) */
    int32 result;             /* what it returned, as its bufmgr.h declares it (bool: 0 or 1) */
} RspTraceEvent;
extern void rsp_trace_clear(void);
extern int rsp_trace_count(void);
extern const RspTraceEvent *rsp_trace_events(void);
/* A chosen GetAdditionalPinLimit() answer for the stream (-1: the buffer manager's own). */
extern void rsp_trace_force_pin_limit(int64 limit);

#endif							/* RSPROBE_TRACE_H */
