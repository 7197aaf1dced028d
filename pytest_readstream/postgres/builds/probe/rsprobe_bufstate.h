/*
 * rsprobe_bufstate.h: a buffer descriptor's state word, read with the width the server's
 * storage/buf_internals.h declares for BufferDesc.state: pg_atomic_uint32 on PostgreSQL 18,
 * pg_atomic_uint64 on 19 and later.  The choice follows the field's type (C11 _Generic), not a
 * version number; the value is widened to uint64, on which BUF_STATE_GET_REFCOUNT and the BM_*
 * flags of either width work.
 */
#ifndef RSPROBE_BUFSTATE_H
#define RSPROBE_BUFSTATE_H

#include "storage/buf_internals.h"

#define RSP_BUF_STATE(desc) \
	_Generic(&(desc)->state, \
			 pg_atomic_uint64 *: pg_atomic_read_u64((pg_atomic_uint64 *) &(desc)->state), \
			 default: (uint64) pg_atomic_read_u32((pg_atomic_uint32 *) &(desc)->state))

/* The descriptor's pin count (shared refcount), as a plain unsigned int. */
#define RSP_BUF_REFCOUNT(state) ((unsigned int) BUF_STATE_GET_REFCOUNT(state))

#endif							/* RSPROBE_BUFSTATE_H */
