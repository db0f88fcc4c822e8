/*
 * cache.h - answers to identical plan requests: request key -> plan,
 * least recently used first out.  Thread-safe.
 */
#ifndef PLANNERD_CACHE_H
#define PLANNERD_CACHE_H

#include <stddef.h>

#include <jansson.h>

struct cache;

/* @capacity 0 makes a cache that keeps nothing. */
struct cache *cache_create(size_t capacity);
void cache_destroy(struct cache *cache);

/* A new reference to the plan for @key, or NULL. */
json_t *cache_get(struct cache *cache, const char *key);
/* Keep @plan (a new reference is taken) for @key. */
void cache_put(struct cache *cache, const char *key, json_t *plan);
void cache_clear(struct cache *cache);
size_t cache_count(struct cache *cache);

#endif /* PLANNERD_CACHE_H */
