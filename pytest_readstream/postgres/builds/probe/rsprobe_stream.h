/*
 * rsprobe_stream.h: the stream entry points the probe calls (read_stream.h), and the
 * block-range callback it hands out a fixed range with, either PostgreSQL's own or, with
 * -DRSPROBE_TRACED, those of the traced copy of the server's read_stream.c that the
 * traced-copy builder generates (rsprobe_traced.h).
 *
 * RSP_HAVE_PAUSE: the server's storage/read_stream.h declares read_stream_pause() and
 * read_stream_resume() (-DRSPROBE_HAVE_PAUSE, set by the probe's builder from the header's
 * parse) and, traced, the copy defines them too.
 */
#ifndef RSPROBE_STREAM_H
#define RSPROBE_STREAM_H

#include "storage/read_stream.h"

#ifdef RSPROBE_TRACED
#include "rsprobe_traced.h"
#define RSP_BEGIN_RELATION rsp_traced_read_stream_begin_relation
#define RSP_NEXT_BUFFER rsp_traced_read_stream_next_buffer
#define RSP_RESET rsp_traced_read_stream_reset
#define RSP_END rsp_traced_read_stream_end
#define RSP_BLOCK_RANGE_CB rsp_traced_block_range_read_stream_cb
#if defined(RSPROBE_HAVE_PAUSE) && RSPROBE_TRACED_HAS_PAUSE
#define RSP_HAVE_PAUSE 1
#define RSP_PAUSE rsp_traced_read_stream_pause
#define RSP_RESUME rsp_traced_read_stream_resume
#endif
#else
#define RSP_BEGIN_RELATION read_stream_begin_relation
#define RSP_NEXT_BUFFER read_stream_next_buffer
#define RSP_RESET read_stream_reset
#define RSP_END read_stream_end
#define RSP_BLOCK_RANGE_CB block_range_read_stream_cb
#ifdef RSPROBE_HAVE_PAUSE
#define RSP_HAVE_PAUSE 1
#define RSP_PAUSE read_stream_pause
#define RSP_RESUME read_stream_resume
#endif
#endif

#ifndef RSP_HAVE_PAUSE
#define RSP_HAVE_PAUSE 0
#endif

#endif							/* RSPROBE_STREAM_H */
