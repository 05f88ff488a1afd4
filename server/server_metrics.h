/* server_metrics.h — what the server counts for a metrics scrape beyond its services'
 * figures: the reloads main performs. module_server_metrics (module_figures.h) reads them. */
#ifndef LFHTTPD_SERVER_METRICS_H
#define LFHTTPD_SERVER_METRICS_H

#include <stdbool.h>

/* A SIGHUP was handled: the new configuration serves (ok) or was refused. */
void server_metrics_reloaded(bool ok);

#endif
