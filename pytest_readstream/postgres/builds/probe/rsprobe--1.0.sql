-- rsprobe 1.0: every function reports one JSON object (text); see rsprobe.c.
\echo Use "CREATE EXTENSION rsprobe" to load this file. \quit

CREATE FUNCTION rsp_info() RETURNS text AS 'MODULE_PATHNAME', 'rsp_info' LANGUAGE C VOLATILE;
CREATE FUNCTION rsp_begin(rel regclass, fork int4, flags int4, strategy text, ring_kb int4,
                          per_buffer_data bool, blocks int8[],
                          range_first int8 DEFAULT NULL, range_end int8 DEFAULT NULL,
                          own bool DEFAULT false)
    RETURNS text AS 'MODULE_PATHNAME', 'rsp_begin' LANGUAGE C VOLATILE;
CREATE FUNCTION rsp_plan(id int4, blocks int8[]) RETURNS text
    AS 'MODULE_PATHNAME', 'rsp_plan' LANGUAGE C VOLATILE STRICT;
CREATE FUNCTION rsp_next(id int4, release int4[]) RETURNS text
    AS 'MODULE_PATHNAME', 'rsp_next' LANGUAGE C VOLATILE STRICT;
CREATE FUNCTION rsp_reset(id int4, release int4[]) RETURNS text
    AS 'MODULE_PATHNAME', 'rsp_reset' LANGUAGE C VOLATILE STRICT;
CREATE FUNCTION rsp_end(id int4, release int4[]) RETURNS text
    AS 'MODULE_PATHNAME', 'rsp_end' LANGUAGE C VOLATILE STRICT;
CREATE FUNCTION rsp_pin(rel regclass, fork int4, block int8) RETURNS text
    AS 'MODULE_PATHNAME', 'rsp_pin' LANGUAGE C VOLATILE STRICT;
CREATE FUNCTION rsp_release(buffers int4[]) RETURNS text
    AS 'MODULE_PATHNAME', 'rsp_release' LANGUAGE C VOLATILE STRICT;
CREATE FUNCTION rsp_state(id int4) RETURNS text
    AS 'MODULE_PATHNAME', 'rsp_state' LANGUAGE C VOLATILE STRICT;
CREATE FUNCTION rsp_extend(rel regclass, nblocks int8) RETURNS text
    AS 'MODULE_PATHNAME', 'rsp_extend' LANGUAGE C VOLATILE STRICT;
CREATE FUNCTION rsp_pins(rel regclass, first int8, last int8) RETURNS int8
    AS 'MODULE_PATHNAME', 'rsp_pins' LANGUAGE C VOLATILE STRICT;
CREATE FUNCTION rsp_pause_at(id int4, positions int8[]) RETURNS text
    AS 'MODULE_PATHNAME', 'rsp_pause_at' LANGUAGE C VOLATILE STRICT;
CREATE FUNCTION rsp_resume(id int4, release int4[]) RETURNS text
    AS 'MODULE_PATHNAME', 'rsp_resume' LANGUAGE C VOLATILE STRICT;
CREATE FUNCTION rsp_force_pin_limit(lim int8) RETURNS text
    AS 'MODULE_PATHNAME', 'rsp_force_pin_limit' LANGUAGE C VOLATILE STRICT;
