/*
 * hmap.h - a string-keyed hash map (chained, growing), for the plan store
 * and the answer cache.  Not thread-safe: its owner locks.
 */
#ifndef PLANNERD_HMAP_H
#define PLANNERD_HMAP_H

#include <stddef.h>

struct hmap;

/* Values are the caller's; hmap_destroy() calls @free_value on each. */
struct hmap *hmap_create(void (*free_value)(void *));
void hmap_destroy(struct hmap *map);

void *hmap_get(const struct hmap *map, const char *key);
/* hmap_put() - set @key (copied) to @value, freeing a value it replaces. */
int hmap_put(struct hmap *map, const char *key, void *value);
/* hmap_remove() - drop @key, freeing its value; 1 if it was there, else 0. */
int hmap_remove(struct hmap *map, const char *key);
size_t hmap_count(const struct hmap *map);

/* Calls @fn for every entry, in no particular order. */
void hmap_foreach(const struct hmap *map,
		  void (*fn)(const char *key, void *value, void *arg),
		  void *arg);

#endif /* PLANNERD_HMAP_H */
