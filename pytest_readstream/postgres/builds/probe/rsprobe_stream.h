/*
 * rsprobe_stream.h: the four stream entry points the probe calls (read_stream.h), and the
 * block-range callback it hands out a fixed range with, either
 * PostgreSQL's own or, with -DRSPROBE_TRACED, those of the traced copy of the server's
 * read_stream.c that the traced-copy builder generates (rsprobe_traced.h).
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
#else
#define RSP_BEGIN_RELATION read_stream_begin_relation
#define RSP_NEXT_BUFFER read_stream_next_buffer
#define RSP_RESET read_stream_reset
#define RSP_END read_stream_end
#define RSP_BLOCK_RANGE_CB block_range_read_stream_cb
#endif

#endif							/* RSPROBE_STREAM_H */
