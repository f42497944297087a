/* bertrain_test: the bertrain program with the test suite's fault injection
 * (fault_hooks.h): the same commands, observed through train_observer. */
#include "cli/cli.h"
#include "fault_hooks.h"

int main(int argc, char **argv) {
    train_observer obs;
    fault_hooks_observer(&obs); /* before any thread: reads the environment */
    return bertrain_main(argc, argv, &obs);
}
