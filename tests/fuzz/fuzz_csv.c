/* libFuzzer target: the CSV reader (src/io/csv.c), every row of the input
 * read as `dlrun train --data table.csv` reads them. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "io/csv.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size == 0)
		return 0;
	struct dl_csv c;
	memset(&c, 0, sizeof c);
	c.path = "fuzz.csv";
	c.f = fmemopen((void *)data, size, "rb");
	if (!c.f)
		return 0;
	struct dl_error err = {0};
	size_t bytes = 0;
	for (int i = 0; i < 100000 && dl_csv_next(&c, &err) == 1; i++)
		for (int k = 0; k < c.n; k++)
			bytes += strlen(c.field[k]) + (size_t)(c.col[k] > 0);
	dl_csv_close(&c);
	return bytes == (size_t)-1;
}
