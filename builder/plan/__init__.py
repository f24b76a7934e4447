"""`trtspec plan`: the stages a build runs (with cache keys) and the memory plan per GPU rank."""
