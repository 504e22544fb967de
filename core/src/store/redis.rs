//! The Redis store (issue 3): Lua scripts from `lua/`, keys `wk:{ev:<id>}:...`.
